// API keys: records in the state store (the key's SHA-256, never the key), each with a role and
// quotas, the same for every control replica. Requests are authenticated here (a short cache in
// front of the store), keys are made, changed and removed here (audited with the acting key), and
// creates and resumes claim their key's quota here: the store admits a claim in one step
// (claimQuota), so a quota holds across replicas.
import { createHash, randomBytes } from 'node:crypto';
import type { MasterConfig } from '../config/schema.js';
import { CubeError } from '../errors.js';
import {
  KEY_ROLES,
  QUOTA_NAMES,
  type ApiKeyRecord,
  type KeyQuotas,
  type KeyRole,
  type KeyView,
  type QuotaLimits,
  type QuotaRefusal,
} from '../model/api-key.js';
import type { SandboxSpecView } from '../model/sandbox.js';
import type { ApiKeyPatch, StateStore } from '../store/types.js';
import { audited } from './admission.js';

/** A key id: `key-` and 8 hex digits of its SHA-256 (what sandboxes' owner and audit rows name). */
export function keyID(key: string): string {
  return `key-${hashKey(key).slice(0, 8)}`;
}

export function hashKey(key: string): string {
  return createHash('sha256').update(key).digest('hex');
}

/** A new key: `e2b_` and 40 hex digits (160 random bits), the shape E2B's own keys have. */
export function newApiKey(): string {
  return `e2b_${randomBytes(20).toString('hex')}`;
}

/** What `key create` takes. */
export interface NewKey {
  name: string;
  role: KeyRole;
  quotas?: KeyQuotas;
}

/** The name a key may have: it is typed on command lines and shown in tables and audit rows. */
const NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;

/**
 * How long an authenticated key is believed without asking the store again: a key removed or
 * demoted on one replica stops working on the others within this (on its own replica at once).
 */
const CACHE_MS = 1000;
/** A claim whose create never recorded its sandbox lapses after this (the create's in-flight count lives as long). */
const CLAIM_TTL_MS = 120_000;

export type KeyApi = Pick<KeyBook, 'create' | 'list' | 'get' | 'update' | 'remove'>;

export class KeyBook {
  private readonly byHash = new Map<string, { rec: ApiKeyRecord | undefined; at: number }>();
  private readonly byID = new Map<string, { rec: ApiKeyRecord | undefined; at: number }>();

  constructor(
    private readonly store: StateStore,
    private readonly master: () => MasterConfig,
  ) {}

  /**
   * The key a request presented, or undefined when it is no key. A lookup the store cannot answer
   * (it is down) answers from the last one when there was one: a Redis or MySQL restart must not
   * lock every client out.
   */
  async authenticate(presented: string): Promise<ApiKeyRecord | undefined> {
    return this.cached(this.byHash, hashKey(presented), (h) => this.store.apiKeyByHash(h));
  }

  /** Whether `presented` is a key this book would authenticate from its cache alone (no store read). */
  knows(presented: string): boolean {
    const c = this.byHash.get(hashKey(presented));
    return c?.rec !== undefined && Date.now() - c.at < CACHE_MS;
  }

  /**
   * The first admin key, from the key every version before keys had (<data-dir>/api-key, --api-key
   * or $CUBE_API_KEY), while the store holds no key at all: existing installs, cubectl and the
   * console keep working. Once there are keys it is not added again (an operator who removed it
   * meant it). Returns what happened, for the log.
   */
  async bootstrap(key: string): Promise<'migrated' | 'present' | 'not-a-key'> {
    const hash = hashKey(key);
    if (await this.store.apiKeyByHash(hash)) return 'present';
    if ((await this.store.listApiKeys()).length > 0) return 'not-a-key';
    const rec: ApiKeyRecord = { id: keyID(key), name: 'admin', role: 'admin', hash, quotas: {}, createdAt: Date.now(), createdBy: 'system' };
    // Two replicas starting at once: one insert wins, the other finds it.
    if (!(await this.store.putApiKey(rec)) && !(await this.store.apiKeyByHash(hash)))
      throw new CubeError('CONFLICT', `could not record the API key ${rec.id} as the first admin key: its id or the name "admin" is taken`);
    return 'migrated';
  }

  /** A new key; the key itself is in the answer only (the store keeps its hash). */
  async create(k: NewKey, actor: string | undefined): Promise<{ key: string; record: KeyView }> {
    checkName(k.name);
    checkRole(k.role);
    checkQuotas(k.quotas ?? {});
    const key = newApiKey();
    const rec: ApiKeyRecord = {
      id: keyID(key),
      name: k.name,
      role: k.role,
      hash: hashKey(key),
      quotas: { ...(k.quotas ?? {}) },
      createdAt: Date.now(),
      createdBy: actor ?? 'system',
    };
    await audited(
      this.store,
      actor,
      'key.create',
      rec.id,
      async () => {
        if (await this.store.putApiKey(rec)) return;
        if ((await this.store.listApiKeys()).some((r) => r.name === k.name))
          throw new CubeError('CONFLICT', `an API key named ${JSON.stringify(k.name)} exists already`);
        // 32 bits of id collided with another key's: a 1-in-4-billion event per pair, refused rather than retried silently.
        throw new CubeError('CONFLICT', `the new key's id ${rec.id} is taken; run the create again`);
      },
      { name: k.name, role: k.role, quotas: rec.quotas },
    );
    return { key, record: (await this.views([rec]))[0]! };
  }

  async list(): Promise<KeyView[]> {
    return this.views(await this.store.listApiKeys());
  }

  /** By id or name; 404 otherwise. */
  async get(ref: string): Promise<KeyView> {
    return (await this.views([await this.find(ref)]))[0]!;
  }

  /** Changes name, role or quotas (null: back to the default). The last admin key cannot become a user key (409). */
  async update(ref: string, patch: ApiKeyPatch, actor: string | undefined): Promise<KeyView> {
    if (patch.name !== undefined) checkName(patch.name);
    if (patch.role !== undefined) checkRole(patch.role);
    checkQuotas(patch.quotas ?? {});
    const rec = await this.find(ref);
    const next = await audited(
      this.store,
      actor,
      'key.set',
      rec.id,
      async () => {
        if (patch.role === 'user' && rec.role === 'admin') await this.keepAnAdmin(rec, 'make it a user key');
        const r = await this.store.updateApiKey(rec.id, patch);
        if (!r) throw new CubeError('NOT_FOUND', `API key ${ref} not found`);
        return r;
      },
      { ...patch },
    );
    this.forget(rec);
    return (await this.views([next]))[0]!;
  }

  /** The last admin key cannot be removed (409): nobody could manage the cluster after it. */
  async remove(ref: string, actor: string | undefined): Promise<void> {
    const rec = await this.find(ref);
    await audited(
      this.store,
      actor,
      'key.rm',
      rec.id,
      async () => {
        if (rec.role === 'admin') await this.keepAnAdmin(rec, 'remove it');
        if (!(await this.store.deleteApiKey(rec.id))) throw new CubeError('NOT_FOUND', `API key ${ref} not found`);
      },
      { name: rec.name },
    );
    this.forget(rec);
  }

  /** The limits in force for a key: its own quotas over the defaults (0 = unlimited). */
  limitsOf(rec: Pick<ApiKeyRecord, 'quotas'> | undefined): QuotaLimits {
    const q = rec?.quotas ?? {};
    return {
      sandboxes: q.sandboxes ?? this.master().api.max_sandboxes_per_key,
      vcpus: q.vcpus ?? 0,
      memory_mib: q.memory_mib ?? 0,
      creates_per_sec: q.creates_per_sec ?? 0,
    };
  }

  /**
   * Runs a create or resume of `sandboxID` for `owner` (a key id; none: not counted) once its
   * quota admits it (429 naming the quota otherwise, at once); the claim is released when `fn`
   * fails, and taken over by the sandbox's record when it is written.
   */
  async claimed<T>(owner: string | undefined, sandboxID: string, spec: Pick<SandboxSpecView, 'cpus' | 'memoryMiB'>, fn: () => Promise<T>): Promise<T> {
    if (owner === undefined) return fn();
    const rec = await this.cached(this.byID, owner, (id) => this.store.getApiKey(id));
    const refusal = await this.store.claimQuota({
      owner,
      sandboxID,
      cpus: spec.cpus,
      memoryMiB: spec.memoryMiB,
      limits: this.limitsOf(rec),
      ttlMs: CLAIM_TTL_MS,
    });
    if (refusal) throw quotaError(rec ?? { id: owner }, refusal, rec?.quotas[refusal.quota] === undefined);
    try {
      return await fn();
    } catch (e) {
      await this.store.releaseQuota(owner, sandboxID).catch(() => undefined); // the claim lapses by its ttl; the create's error is the answer
      throw e;
    }
  }

  /** 429 unless `count` more sandboxes fit the key's sandboxes quota now (a fork is refused whole). */
  async assertRoomFor(owner: string | undefined, count: number): Promise<void> {
    if (owner === undefined) return;
    const rec = await this.cached(this.byID, owner, (id) => this.store.getApiKey(id));
    const limit = this.limitsOf(rec).sandboxes;
    const used = (await this.store.quotaUsage([owner])).get(owner)!.sandboxes;
    if (limit > 0 && used + count > limit)
      throw quotaError(rec ?? { id: owner }, { quota: 'sandboxes', used, limit, retryAfter: 1 }, rec?.quotas.sandboxes === undefined, count);
  }

  private async views(recs: ApiKeyRecord[]): Promise<KeyView[]> {
    const usage = await this.store.quotaUsage(recs.map((r) => r.id));
    return recs.map(({ hash: _h, ...r }) => ({ ...r, usage: usage.get(r.id)!, limits: this.limitsOf(r) }));
  }

  private async find(ref: string): Promise<ApiKeyRecord> {
    const rec = (await this.store.getApiKey(ref)) ?? (await this.store.listApiKeys()).find((r) => r.name === ref);
    if (!rec) throw new CubeError('NOT_FOUND', `API key ${ref} not found (cubectl key ls lists them by id and name)`);
    return rec;
  }

  private async keepAnAdmin(rec: ApiKeyRecord, what: string): Promise<void> {
    if ((await this.store.listApiKeys()).some((r) => r.role === 'admin' && r.id !== rec.id)) return;
    throw new CubeError(
      'CONFLICT',
      `API key "${rec.name}" (${rec.id}) is the last admin key: make another admin key first (cubectl key create NAME --role admin), then ${what}`,
    );
  }

  private forget(rec: ApiKeyRecord): void {
    this.byHash.delete(rec.hash);
    this.byID.delete(rec.id);
  }

  private async cached(
    map: Map<string, { rec: ApiKeyRecord | undefined; at: number }>,
    k: string,
    read: (k: string) => Promise<ApiKeyRecord | undefined>,
  ): Promise<ApiKeyRecord | undefined> {
    const c = map.get(k);
    if (c && Date.now() - c.at < CACHE_MS) return c.rec;
    try {
      const rec = await read(k);
      // Only what exists is kept: a flood of wrong keys must not grow the map.
      if (rec) map.set(k, { rec, at: Date.now() });
      else map.delete(k);
      return rec;
    } catch (e) {
      if (c) return c.rec;
      throw e;
    }
  }
}

/** The 429 of a refused claim: which quota, the numbers, and how to change it. */
function quotaError(key: Pick<ApiKeyRecord, 'id'> & Partial<Pick<ApiKeyRecord, 'name'>>, r: QuotaRefusal, byDefault: boolean, asked?: number): CubeError {
  const who = key.name !== undefined ? `API key "${key.name}" (${key.id})` : `API key ${key.id}`;
  const fix = `cubectl key set ${key.name ?? key.id} --${r.quota.replace(/_/g, '-')} N`;
  const source = byDefault && r.quota === 'sandboxes' ? `api.max_sandboxes_per_key, the default; ${fix}` : fix;
  const what =
    r.quota === 'creates_per_sec'
      ? `at most ${r.limit} creates per second`
      : r.quota === 'sandboxes'
        ? `${r.used} running or starting${asked !== undefined ? ` + ${asked} asked` : ''}, at most ${r.limit}`
        : `${r.used} in use, at most ${r.limit}`;
  return new CubeError('QUOTA_EXCEEDED', `${who} is at its ${r.quota} quota: ${what} (${source})`, {
    retryAfter: r.retryAfter,
    details: { quota: r.quota, used: r.used, limit: r.limit },
  });
}

function checkName(name: string): void {
  if (!NAME.test(name))
    throw new CubeError('BAD_REQUEST', `key name ${JSON.stringify(name.slice(0, 80))}: 1 to 64 of A-Z a-z 0-9 . _ -, starting with a letter or digit`);
}

function checkRole(role: string): void {
  if (!(KEY_ROLES as readonly string[]).includes(role)) throw new CubeError('BAD_REQUEST', `role ${JSON.stringify(role)}: one of ${KEY_ROLES.join(', ')}`);
}

function checkQuotas(q: Record<string, number | null | undefined>): void {
  for (const [k, v] of Object.entries(q)) {
    if (!(QUOTA_NAMES as readonly string[]).includes(k))
      throw new CubeError('BAD_REQUEST', `unknown quota ${JSON.stringify(k)}: one of ${QUOTA_NAMES.join(', ')}`);
    if (v === null || v === undefined) continue;
    const whole = k !== 'vcpus';
    if (typeof v !== 'number' || !Number.isFinite(v) || v < 0 || (whole && !Number.isInteger(v)) || v > 1e9)
      throw new CubeError('BAD_REQUEST', `quota ${k}: ${whole ? 'a whole number' : 'a number'} from 0 (unlimited) up, got ${JSON.stringify(v)}`);
  }
}
