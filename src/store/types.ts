// The state-store contract: every record the control plane keeps. Role all uses the embedded
// SQLite backend (embedded.ts); a cluster uses Redis + MySQL behind the same interface, and both
// pass the same contract tests (test/store/contract.ts). Every method is async so a networked
// backend fits; none returns live objects (callers get copies).
import type { ApiKeyRecord, KeyQuotas, KeyRole, KeyUsage, QuotaClaim, QuotaRefusal } from '../model/api-key.js';
import type { EventView } from '../model/event.js';
import type { LifecycleStore } from './lifecycle.js';
import type { NodeView } from '../model/node.js';
import type { VolumeRecord } from '../model/volume.js';
import { epochMs, epochMsOpt } from '../model/time.js';
import { withEpochTimes, type ListFilter, type SandboxRecord, type SandboxState, type SnapshotRecord } from '../model/sandbox.js';

export interface ConfigVersionRecord {
  version: number;
  /** ISO 8601. */
  at: string;
  actor: string;
  /** What changed, as the operator would read it ("reload", "set host.quota.paused_resource_release_ratio"). */
  reason: string;
  master: unknown;
  cubelet: unknown;
}

export interface AuditRecord {
  id: number;
  /** ISO 8601. */
  at: string;
  /** API key id (never the key), or 'system'. */
  actor: string;
  /** The key's name when the record was written (the store reads it from the key's record); absent for 'system' or a key gone since. */
  actorName?: string;
  /** e.g. 'sandbox.create', 'node.cordon', 'config.set'. */
  action: string;
  /** Sandbox id, node id or config path. */
  target: string;
  /** 'ok' or the error message. */
  outcome: string;
  detail?: Record<string, unknown>;
}

export interface NodeRecord {
  nodeID: string;
  address?: string;
  cordoned: boolean;
  draining: boolean;
  /** Epoch ms: when a pending drain --evict destroys the node's sandboxes (whichever replica is alive does it). */
  evictAt?: number;
  /** Epoch ms of registration. */
  joinedAt: number;
}

/**
 * A create's idempotency key (control/create-keys.ts): which sandbox the key's create is making or
 * made, and its outcome once known. Kept in the durable half of the store, so any replica answers a
 * repeated create the same way, also after the replica that took the first one died.
 */
export interface CreateKeyRecord {
  /** The key as stored: a hash of the caller's key id and the client's key. */
  key: string;
  /** The sandbox the claim's create makes (a new id for each node it tries). */
  sandboxID: string;
  /** Epoch ms: the claim's create has an outcome by then, or its sandbox is settled from the node's truth. */
  deadline: number;
  /** Epoch ms: forgotten after this. */
  expiresAt: number;
  /**
   * Once known: `created` (the sandbox), `refused` (the same refusal for every repeat), or `failed`
   * (nothing was made and nothing is left: the next create with the key creates).
   */
  outcome?: { created: true } | { refused: { kind: string; message: string } } | { failed: string };
}

export interface StateStore {
  /** Tombstones, E2B lifecycle events, webhooks and their deliveries (src/store/lifecycle.ts). */
  readonly lifecycle: LifecycleStore;
  /** Runs migrations (idempotent) and opens connections. */
  init(): Promise<void>;
  close(): Promise<void>;

  /** Inserts or replaces the record; returns its new generation (the record's own `generation` is ignored). */
  putSandbox(rec: SandboxRecord): Promise<number>;
  /**
   * Compare-and-set: writes only if the live record's generation is still `generation` (0: only
   * if there is no live record; the cluster backend also refuses an id its history holds as deleted). Returns the new generation, 0 when another
   * write (or a delete) came first.
   */
  putSandboxIf(rec: SandboxRecord, generation: number): Promise<number>;
  /**
   * The create's answer reached the client's socket: the mark of a create not yet answered
   * (`createBy` on a made sandbox) leaves the record readers see, and later writes carrying it do
   * not bring it back. Until then a replica's death leaves the mark, and the reconcile undoes the
   * sandbox past its deadline.
   */
  markAnswered(sandboxID: string): Promise<void>;
  /** Deletes only if the live record's generation is still `generation`; false otherwise. */
  deleteSandboxIf(sandboxID: string, generation: number): Promise<boolean>;
  /**
   * The live record as the compare-and-set sees it (getSandbox may answer from a copy that lags
   * it: the cluster's routes in Redis); what a writer retries over after losing a compare-and-set.
   */
  getSandboxForWrite(sandboxID: string): Promise<SandboxRecord | undefined>;
  /**
   * Whether the sandbox was deleted and is not live again: a node that still lists it (it was
   * unreachable when the delete came) is told to destroy it. A remembered delete.
   */
  wasDeleted(sandboxID: string): Promise<boolean>;
  /** Sets `state` and `reason` on every live record of the node not in `state` yet (compare-and-set each: a newer write stays); returns those marked. */
  markNodeSandboxes(nodeID: string, state: SandboxState, reason: string): Promise<SandboxRecord[]>;
  /** Sets the state (and reason) of an existing record; false when there is none. */
  updateSandboxState(sandboxID: string, state: SandboxState, reason?: string): Promise<boolean>;
  getSandbox(sandboxID: string): Promise<SandboxRecord | undefined>;
  listSandboxes(filter?: ListFilter): Promise<SandboxRecord[]>;
  deleteSandbox(sandboxID: string): Promise<void>;

  /** Assigns the next id (strictly increasing); keeps at most the retention the store was built with. */
  appendEvent(e: Omit<EventView, 'id'>): Promise<EventView>;
  /**
   * A node's notice, numbered by its heartbeat sender (`seq` increases per sender): appended like
   * appendEvent unless that sender's `seq` was already (a heartbeat sent again after its answer
   * was lost, to this replica or another): then undefined.
   */
  appendNodeEvent(e: Omit<EventView, 'id'>, origin: { sender: string; seq: number }): Promise<EventView | undefined>;
  /** Events with id > sinceID, oldest first; with beforeID the newest `limit` with id < beforeID (paging back), oldest first; with neither the newest `limit`, oldest first. */
  listEvents(opts?: { sinceID?: number; beforeID?: number; limit?: number }): Promise<EventView[]>;
  /** Makes the event history durable where appending did not (call it periodically, from one replica: the `event-archive` lease). */
  archiveEvents(): Promise<void>;

  putConfigVersion(rec: ConfigVersionRecord): Promise<void>;
  /** The config in force (undefined until seeded from a replica's files). */
  configHead(): Promise<ConfigVersionRecord | undefined>;
  /**
   * Makes `rec` the config in force if the one in force is still version `expected` (0: none yet)
   * and records it in the history; false when another change came first.
   */
  casConfigHead(rec: ConfigVersionRecord, expected: number): Promise<boolean>;
  latestConfigVersion(): Promise<ConfigVersionRecord | undefined>;
  listConfigVersions(limit?: number): Promise<ConfigVersionRecord[]>;

  /** Appends the record with the name its actor's key has now (actorName: the caller's is ignored). */
  appendAudit(rec: Omit<AuditRecord, 'id' | 'actorName'>): Promise<AuditRecord>;
  /** Newest first. */
  listAudit(opts?: { limit?: number; actor?: string }): Promise<AuditRecord[]>;

  putNode(rec: NodeRecord): Promise<void>;
  getNode(nodeID: string): Promise<NodeRecord | undefined>;
  listNodes(): Promise<NodeRecord[]>;
  /** Removes the node's registry record, its templates and its live state. */
  deleteNode(nodeID: string): Promise<void>;

  /** Replaces the templates a node reports holding (kept durably: they answer for templates while live state is rebuilt). */
  setNodeTemplates(nodeID: string, templateIDs: string[]): Promise<void>;
  listTemplates(): Promise<{ templateID: string; nodes: string[] }[]>;

  // --- live node state: what heartbeats bring, and lost markers
  /** Each node's last reported view, kept `ttlMs` (a lost node still shows its last numbers). */
  putNodeMetrics(views: NodeView[], ttlMs: number): Promise<void>;
  /** The nodes' last views whose time has not run out. Shared between reads: read-only. */
  getNodeMetrics(nodeIDs: string[]): Promise<Map<string, NodeView>>;
  /**
   * Heartbeats that carry no view (it did not change): each node's view is kept another `ttlMs`
   * and getNodeMetrics answers it with this `lastSeen`. Returns the nodes whose view is not held
   * (never sent, expired, or the store restarted empty): they must send it.
   */
  touchNodeMetrics(seen: { nodeID: string; lastSeen: number }[], ttlMs: number): Promise<string[]>;
  /** Marks a node lost; true only for the call that changed it (so one node.lost event). */
  markNodeLost(nodeID: string): Promise<boolean>;
  clearNodeLost(nodeID: string): Promise<void>;
  lostNodes(nodeIDs: string[]): Promise<Set<string>>;

  // --- creates in flight per node, every replica's
  incInFlight(nodeID: string): Promise<number>;
  decInFlight(nodeID: string): Promise<void>;
  /** Nodes without creates in flight are absent. */
  inFlight(): Promise<Map<string, number>>;

  // --- per-sandbox operation locks: leases of `ttlMs` that their holder renews while it works
  /**
   * The token to renew and release with, or undefined while another holds the lock. The token is
   * a fencing number larger than any handed out before, also across a restart of the store that
   * emptied it (fenceFloor): nodes refuse calls carrying one lower than they accepted.
   */
  acquireLock(sandboxID: string, ttlMs: number): Promise<string | undefined>;
  /** Extends the lease by `ttlMs` if `token` still holds it; false when it lapsed. */
  renewLock(sandboxID: string, token: string, ttlMs: number): Promise<boolean>;
  /** Releases only if `token` still holds it. */
  releaseLock(sandboxID: string, token: string): Promise<boolean>;

  /** Takes or extends the lease `name` for `holder` (one replica does a job); false while another holds it. */
  holdLease(name: string, holder: string, ttlMs: number): Promise<boolean>;

  // --- API keys: records (durable) and the usage their quotas count
  /** Inserts the key; false when its id, name or hash is taken. */
  putApiKey(rec: ApiKeyRecord): Promise<boolean>;
  getApiKey(id: string): Promise<ApiKeyRecord | undefined>;
  /** The key whose SHA-256 (hex) is `hash`: how a request is authenticated. */
  apiKeyByHash(hash: string): Promise<ApiKeyRecord | undefined>;
  /** Oldest first. */
  listApiKeys(): Promise<ApiKeyRecord[]>;
  /** Changes name, role or quotas (a quota set to null goes back to its default); the record after, undefined when there is none; 409 when the name is taken. */
  updateApiKey(id: string, patch: ApiKeyPatch): Promise<ApiKeyRecord | undefined>;
  /** false when there was none. */
  deleteApiKey(id: string): Promise<boolean>;
  /**
   * Admits a create or resume against its key's quotas in one step, whichever replica asks: what
   * the key's live records in HOLDING_STATES hold, plus the claims admitted and not recorded yet,
   * plus this claim, must fit every limit, and a creates_per_sec token must be there (taken only
   * when it is admitted). The claim lasts until its sandbox's record is written in a holding
   * state (the record counts from then on), releaseQuota, or `ttlMs`. A claim for a sandbox that
   * holds one already is admitted again (a retry). Undefined when admitted, else the refusal.
   */
  claimQuota(claim: QuotaClaim): Promise<QuotaRefusal | undefined>;
  /** Drops a claim (its create or resume failed); nothing when there is none. */
  releaseQuota(owner: string, sandboxID: string): Promise<void>;
  /** Each owner's usage (zero for an owner with none). */
  quotaUsage(owners: string[]): Promise<Map<string, KeyUsage>>;
  // --- idempotent creates (CreateKeyRecord), durable
  /**
   * Claims `rec.key` for `rec`, in one step: when no claim holds the key (or it expired), or when
   * `over` is given and the claim in force is still the one for sandbox `over` with no outcome
   * but `failed` (its creator moves to another node, or a repeat takes over a failed create).
   * Returns the claim in force after the call: `rec` when it won.
   */
  claimCreateKey(rec: CreateKeyRecord, over?: string): Promise<CreateKeyRecord>;
  /** The claim in force for `key` (undefined when none, or expired). */
  getCreateKey(key: string): Promise<CreateKeyRecord | undefined>;
  /** Records the outcome of the claim for sandbox `sandboxID`; false when the key is claimed for another. */
  settleCreateKey(key: string, sandboxID: string, outcome: NonNullable<CreateKeyRecord['outcome']>): Promise<boolean>;

  /** Inserts or replaces a kept snapshot's record. */
  putSnapshot(rec: SnapshotRecord): Promise<void>;
  getSnapshot(snapshotID: string): Promise<SnapshotRecord | undefined>;
  /** Oldest first. */
  listSnapshots(): Promise<SnapshotRecord[]>;
  /** false when there was none. */
  deleteSnapshot(snapshotID: string): Promise<boolean>;

  /** Records a new volume; false when its owner has one of that name already (names are unique per owner). */
  addVolume(rec: VolumeRecord): Promise<boolean>;
  getVolume(volumeID: string): Promise<VolumeRecord | undefined>;
  /** Oldest first. */
  listVolumes(): Promise<VolumeRecord[]>;
  /** false when there was none. */
  deleteVolume(volumeID: string): Promise<boolean>;
}

/** A change to a key: a quota set to null goes back to its default. */
export interface ApiKeyPatch {
  name?: string;
  role?: KeyRole;
  quotas?: { [K in keyof KeyQuotas]?: number | null };
}

/** The record with `patch` applied. Pure. */
export function patchedKey(rec: ApiKeyRecord, patch: ApiKeyPatch): ApiKeyRecord {
  const quotas: KeyQuotas = { ...rec.quotas };
  for (const [k, v] of Object.entries(patch.quotas ?? {}) as [keyof KeyQuotas, number | null | undefined][]) {
    if (v === null) delete quotas[k];
    else if (v !== undefined) quotas[k] = v;
  }
  return { ...rec, ...(patch.name !== undefined ? { name: patch.name } : {}), ...(patch.role !== undefined ? { role: patch.role } : {}), quotas };
}

/**
 * Where a fencing counter that is not there (a new store, Redis restarted empty, role all
 * restarted) starts: the wall clock in microseconds, so its tokens stay above every token handed
 * out before (nodes keep the highest they accepted, also across their own restarts) unless more
 * than a million locks a second were taken, or the clock went back.
 */
export function fenceFloor(nowMs = Date.now()): number {
  return nowMs * 1000;
}

/** Shared filter semantics so every backend answers a ListFilter the same way. */
export function matchesFilter(rec: SandboxRecord, f: ListFilter = {}): boolean {
  if (f.state && f.state.length > 0 && !f.state.includes(rec.state)) return false;
  if (f.nodeID && rec.nodeID !== f.nodeID) return false;
  if (f.templateID && rec.templateID !== f.templateID) return false;
  if (f.metadata) for (const [k, v] of Object.entries(f.metadata)) if (!Object.hasOwn(rec.metadata, k) || rec.metadata[k] !== v) return false;
  return true;
}

/** A stored record read back (times written as ISO 8601 by older versions are read as epoch ms). */
export function parseRecord(json: string): SandboxRecord {
  return withEpochTimes(JSON.parse(json) as SandboxRecord);
}

/** A stored node record read back (times written as ISO 8601 by older versions are read as epoch ms). */
export function parseNodeRecord(json: string): NodeRecord {
  const r = JSON.parse(json) as NodeRecord;
  const { joinedAt, evictAt } = r as { joinedAt: number | string; evictAt?: number | string };
  if (typeof joinedAt === 'number' && typeof evictAt !== 'string') return r;
  const ev = epochMsOpt(evictAt);
  return { ...r, joinedAt: epochMs(joinedAt), ...(ev !== undefined ? { evictAt: ev } : {}) };
}

/** The record as a backend stores it: its generation lives beside it (a column), not in it. */
export function recordJson(rec: SandboxRecord): string {
  const { generation: _g, ...rest } = rec;
  return JSON.stringify(rest);
}

/** A create key's row as both backends keep it (columns, not JSON: the claim's conditions read them). */
export interface CreateKeyRow {
  k: string;
  sandbox_id: string;
  deadline: number | string;
  expires_at: number | string;
  outcome: string | null;
}

export function createKeyRow(r: CreateKeyRow): CreateKeyRecord {
  const rec: CreateKeyRecord = { key: r.k, sandboxID: r.sandbox_id, deadline: Number(r.deadline), expiresAt: Number(r.expires_at) };
  if (r.outcome !== null) rec.outcome = JSON.parse(r.outcome) as NonNullable<CreateKeyRecord['outcome']>;
  return rec;
}
