// Idempotent creates (design.md section 8, "one create, one sandbox"). A create carrying a client
// key (the `Idempotency-Key` header, or the metadata label `cube.idempotency_key` that unchanged
// E2B code can set) claims the key in the durable store before it places anything; a repeat of it,
// on any replica, finds the claim and answers with the claim's outcome: the same sandbox, or the
// same refusal. A repeat that comes while the first is still under way waits for its outcome. The
// claim names the sandbox id the create is making, so a replica that dies mid-create leaves a
// record the key's next create finds and adopts once the node's truth settled it
// (create-outcomes.ts), never a second sandbox.
import { createHash } from 'node:crypto';
import type { Logger } from 'pino';
import { CubeError, toCubeError, type ErrorKind } from '../errors.js';
import { newSandboxID } from '../ids.js';
import type { SandboxRecord } from '../model/sandbox.js';
import type { CreateKeyRecord, StateStore } from '../store/types.js';

/** The metadata label that carries the key when the client cannot set a header (unchanged E2B SDK code). */
export const CREATE_KEY_LABEL = 'cube.idempotency_key';
/** The header, as node:http gives it (lower case). */
export const CREATE_KEY_HEADER = 'idempotency-key';
/**
 * A key's claim and outcome are kept this long after its create began: a repeat within it gets the
 * same answer. Creates settle within a minute (three nodes' deadlines at most), so every outcome
 * is kept at least the 10 minutes the contract promises.
 */
const KEEP_MS = 15 * 60_000;
/** The claim's deadline is the create's deadline plus this: the last look at a silent node, and the record's write. */
const CLAIM_GRACE_MS = 5000;
/** A repeat waits for the first create's outcome at most this long, then answers 503 (well under the E2B SDK's 60 s request timeout). */
const WAIT_MS = 45_000;
const POLL_MS = 100;

/** The key as stored: scoped to the caller's API key (another tenant's identical key is another key), hashed to a fixed length. */
export function createKeyOf(actor: string | undefined, clientKey: string): string {
  return createHash('sha256')
    .update(`${actor ?? ''}\0${clientKey}`)
    .digest('hex');
}

/** The client's key from a create request: the header, else the metadata label; 400 when it is empty or too long. */
export function clientKeyOf(header: string | string[] | undefined, metadata: Record<string, string> | undefined): string | undefined {
  const key = (Array.isArray(header) ? header[0] : header) ?? metadata?.[CREATE_KEY_LABEL];
  if (key === undefined) return undefined;
  if (key.length === 0 || key.length > 255) throw new CubeError('BAD_REQUEST', `idempotency key: 1 to 255 characters (got ${key.length})`);
  return key;
}

/**
 * What a claimed create runs: it makes sandbox `sandboxID`; `moveTo` is called before it tries
 * another node with a new id (the claim follows; it throws when a repeat took the key over).
 */
export type ClaimedCreate = (sandboxID: string, moveTo: (sandboxID: string) => Promise<void>) => Promise<SandboxRecord>;

/** The claim went to a repeat while its creator moved to another node: the creator waits for it instead. */
class Superseded extends Error {}

/** Refusals a repeat gets again: the request's own fault. Busy, overloaded or unreachable answers are not kept (the repeat tries anew). */
function isRefusal(e: CubeError): boolean {
  return e.http >= 400 && e.http < 500 && e.http !== 429;
}

export class CreateKeys {
  /** Creates under way on this replica, by key: a duplicate here shares the first's outcome without polling the store. */
  private readonly here = new Map<string, Promise<SandboxRecord>>();

  constructor(
    private readonly store: StateStore,
    /** The create deadline in force (sandbox.create_deadline_sec), ms. */
    private readonly deadlineMs: () => number,
    private readonly log: Logger,
  ) {}

  /** Runs `create` once per key: the first call creates, every repeat (here or on another replica) answers with its outcome. */
  run(key: string, create: ClaimedCreate): Promise<SandboxRecord> {
    const under = this.here.get(key);
    if (under) return under;
    const p = this.claimOrWait(key, create).finally(() => this.here.delete(key));
    this.here.set(key, p);
    return p;
  }

  private async claimOrWait(key: string, create: ClaimedCreate): Promise<SandboxRecord> {
    const until = Date.now() + WAIT_MS;
    let over: string | undefined;
    for (;;) {
      const sandboxID = newSandboxID();
      const claim = await this.store.claimCreateKey(this.claimFor(key, sandboxID), over);
      if (claim.sandboxID === sandboxID) {
        try {
          return await this.createClaimed(key, sandboxID, create);
        } catch (e) {
          if (!(e instanceof Superseded)) throw e;
          continue;
        }
      }
      const seen = await this.outcomeOf(claim, until);
      if ('rec' in seen) return seen.rec;
      over = seen.failed;
    }
  }

  private claimFor(key: string, sandboxID: string): CreateKeyRecord {
    const now = Date.now();
    return { key, sandboxID, deadline: now + this.deadlineMs() + CLAIM_GRACE_MS, expiresAt: now + KEEP_MS };
  }

  private async createClaimed(key: string, first: string, create: ClaimedCreate): Promise<SandboxRecord> {
    let current = first;
    const moveTo = async (next: string): Promise<void> => {
      const claim = await this.store.claimCreateKey(this.claimFor(key, next), current);
      if (claim.sandboxID !== next) throw new Superseded();
      current = next;
    };
    let rec: SandboxRecord;
    try {
      rec = await create(first, moveTo);
    } catch (e) {
      if (e instanceof Superseded) throw e;
      const err = toCubeError(e);
      // A repeat learns it without waiting for the deadline; if this write fails, the deadline tells it.
      const outcome = isRefusal(err) ? { refused: { kind: err.kind, message: err.message } } : { failed: err.message };
      await this.store
        .settleCreateKey(key, current, outcome)
        .catch((w: unknown) => this.log.warn({ err: toCubeError(w).message, sandboxID: current }, 'could not record a keyed create outcome'));
      throw e;
    }
    // Best effort: a repeat also finds the sandbox by its record.
    await this.store
      .settleCreateKey(key, rec.sandboxID, { created: true })
      .catch((w: unknown) => this.log.warn({ err: toCubeError(w).message, sandboxID: rec.sandboxID }, 'could not record a keyed create outcome'));
    return rec;
  }

  /**
   * Waits for the outcome of `claim`'s create: its sandbox (from its record, which the creator or
   * the node's truth settles), its refusal (thrown again), or `failed` with the sandbox id to take
   * the key over from (nothing was made, or what was made is gone for good).
   */
  private async outcomeOf(claim: CreateKeyRecord, until: number): Promise<{ rec: SandboxRecord } | { failed: string | undefined }> {
    for (let cur: CreateKeyRecord | undefined = claim; ;) {
      const outcome = cur.outcome;
      if (outcome && 'refused' in outcome) throw new CubeError(outcome.refused.kind as ErrorKind, outcome.refused.message);
      if (outcome && 'failed' in outcome) return { failed: cur.sandboxID };
      const rec = await this.store.getSandbox(cur.sandboxID);
      if (rec && rec.state !== 'creating' && rec.state !== 'gone') return { rec };
      if (!rec && outcome && 'created' in outcome)
        throw new CubeError('CONFLICT', `the create with this idempotency key made sandbox ${cur.sandboxID}, which was deleted since`);
      // Nothing left of a create past its deadline: its replica died before the record, or the record was settled away.
      if (!rec && Date.now() > cur.deadline) return { failed: cur.sandboxID };
      if (Date.now() > until)
        throw new CubeError('SANDBOX_BUSY', `the create with this idempotency key (sandbox ${cur.sandboxID}) has no outcome yet; retry with the same key`, {
          retryAfter: 1,
        });
      await new Promise((r) => setTimeout(r, POLL_MS));
      const next = await this.store.getCreateKey(claim.key);
      if (!next) return { failed: undefined };
      cur = next;
    }
  }
}
