// Every create ends in an outcome a client knows (design.md section 8). A create holds its
// sandbox's operation lock from before its record is written until its answer is (service.ts
// createOnce), so a `creating` record whose lock is free has lost its creator: the replica died,
// or the create failed while the store was away and could not remove its record. Such a record is
// settled from the node's truth: a sandbox whose create carried an idempotency key is adopted (the
// key's next create returns it); one without a key has nobody who could ever learn of it and is
// undone, with an event that says why. Nothing stays `creating` past the create's deadline plus a
// sweep (about 8 s: the 2 s sweep, the 3 s lock lease, a 3 s look at the node).
import type { Logger } from 'pino';
import type { NodeApi } from '../cubelet/types.js';
import { toCubeError } from '../errors.js';
import type { EventKind, EventView } from '../model/event.js';
import type { SandboxRecord, SandboxView } from '../model/sandbox.js';
import type { StateStore } from '../store/types.js';

/** Why a create is undone: its sandbox was made, but nobody can learn of it. */
export const CREATOR_GONE = 'its control replica went before answering the client, and the create carried no idempotency key to adopt it by';
/** Why a create is undone: its deadline passed and its node does not hold it. */
export const notOnNode = (nodeID: string): string => `it did not finish by its deadline (node ${nodeID} does not hold it)`;

/** A `creating` record of an older version (no deadline in it) is over this long after its start. */
export const CREATING_GRACE_MS = 120_000;

/** One replica at a time settles stale creates (a lease), every SETTLE_EVERY_MS. */
export const SETTLE_LEASE = 'create-settle';
export const SETTLE_EVERY_MS = 2000;
/** How long the sweep asks a node about one sandbox: a frozen node must not hold the sweep up. */
const LOOK_MS = 3000;

export interface OutcomeDeps {
  store: StateStore;
  /** The node's API, its calls fenced with the sandbox lock's token. */
  node(nodeID: string, fence: string): Promise<NodeApi>;
  /** Runs `fn` holding the sandbox's lock; skipped while another holds it (its creator is alive). */
  withLock(sandboxID: string, fn: (fence: string) => Promise<void>): Promise<void>;
  /** Writes the node's view over the record (keeping its secrets). */
  adopt(rec: SandboxRecord, view: SandboxView): Promise<void>;
  event(e: Omit<EventView, 'id' | 'at'> & { kind: EventKind }): Promise<void>;
  log: Logger;
}

/**
 * Undoes a create nobody will learn the outcome of: the sandbox destroyed on its node (a node that
 * cannot be reached destroys it when it reports: the delete is remembered), its record deleted
 * only if nothing wrote it since, and an event with the reason.
 */
export async function undoCreate(d: Pick<OutcomeDeps, 'store' | 'event' | 'log'>, rec: SandboxRecord, node: NodeApi | undefined, why: string): Promise<void> {
  const gone = rec.generation === undefined ? (await d.store.deleteSandbox(rec.sandboxID), true) : await d.store.deleteSandboxIf(rec.sandboxID, rec.generation);
  if (!gone) return;
  const failed = await node?.destroySandbox(rec.sandboxID).then(
    () => false,
    (e: unknown) => (
      d.log.warn({ err: toCubeError(e).message, sandboxID: rec.sandboxID }, 'undo of a create: node destroy failed; done when the node reports it'),
      true
    ),
  );
  await d.event({
    kind: 'sandbox.destroyed',
    nodeID: rec.nodeID,
    sandboxID: rec.sandboxID,
    message: `create of ${rec.sandboxID} undone: ${why}${failed ? `; node ${rec.nodeID} destroys it when it reports it` : ''}`,
  });
}

/** `creating` records past their deadline (records of older versions, without one, after `legacyGraceMs`). */
export function staleCreates(records: SandboxRecord[], now: number, legacyGraceMs: number): SandboxRecord[] {
  return records.filter((r) => r.state === 'creating' && now > (r.createBy ?? r.startedAt + legacyGraceMs));
}

/**
 * Settles one stale create under its lock (skipped while its creator holds it): from the node's
 * answer, adopted when keyed, undone otherwise; a node that does not answer has the record
 * deleted (remembered: it destroys the sandbox when it reports it).
 */
export async function settleCreate(d: OutcomeDeps, stale: SandboxRecord): Promise<void> {
  await d.withLock(stale.sandboxID, async (fence) => {
    const rec = await d.store.getSandboxForWrite(stale.sandboxID);
    if (!rec || rec.state !== 'creating') return;
    let node: NodeApi | undefined;
    let view: SandboxView | undefined;
    let reached = true;
    try {
      node = await d.node(rec.nodeID, fence);
      view = await Promise.race([
        node.getSandbox(rec.sandboxID),
        new Promise<never>((_, no) => setTimeout(() => no(new Error(`no answer within ${LOOK_MS} ms`)), LOOK_MS).unref()),
      ]);
    } catch {
      reached = false;
    }
    if (view && rec.keyed) {
      await d.adopt(rec, view);
      await d.event({
        kind: 'sandbox.created',
        nodeID: rec.nodeID,
        sandboxID: rec.sandboxID,
        message: `create of ${rec.sandboxID} settled from node ${rec.nodeID} (${view.state}) after its replica went before answering; the idempotency key's next create returns it`,
      });
      return;
    }
    const why = view
      ? CREATOR_GONE
      : reached
        ? notOnNode(rec.nodeID)
        : `it did not finish by its deadline (node ${rec.nodeID} does not answer: if it made it, it destroys it when it reports it)`;
    await undoCreate(d, rec, view ? node : undefined, why);
  });
}
