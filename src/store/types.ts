// The state-store contract: every record the control plane keeps. Role all uses the embedded
// SQLite backend (embedded.ts); a cluster uses Redis + MySQL behind the same interface, and both
// pass the same contract tests (test/store/contract.ts). Every method is async so a networked
// backend fits; none returns live objects (callers get copies).
import type { EventView, SandboxState } from '../api/types.js';
import type { ListFilter, SandboxRecord, SnapshotRecord } from '../scheduler/control-plane.js';

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
  /** ISO 8601: when a pending drain --evict destroys the node's sandboxes (whichever replica is alive does it). */
  evictAt?: string;
  /** ISO 8601 of registration. */
  joinedAt: string;
}

export interface StateStore {
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
  /** Deletes only if the live record's generation is still `generation`; false otherwise. */
  deleteSandboxIf(sandboxID: string, generation: number): Promise<boolean>;
  /** Sets the state (and reason) of an existing record; false when there is none. */
  updateSandboxState(sandboxID: string, state: SandboxState, reason?: string): Promise<boolean>;
  getSandbox(sandboxID: string): Promise<SandboxRecord | undefined>;
  listSandboxes(filter?: ListFilter): Promise<SandboxRecord[]>;
  deleteSandbox(sandboxID: string): Promise<void>;

  /** Assigns the next id (strictly increasing); keeps at most the retention the store was built with. */
  appendEvent(e: Omit<EventView, 'id'>): Promise<EventView>;
  /** Events with id > sinceID, oldest first; with beforeID the newest `limit` with id < beforeID (paging back), oldest first; with neither the newest `limit`, oldest first. */
  listEvents(opts?: { sinceID?: number; beforeID?: number; limit?: number }): Promise<EventView[]>;

  putConfigVersion(rec: ConfigVersionRecord): Promise<void>;
  latestConfigVersion(): Promise<ConfigVersionRecord | undefined>;
  listConfigVersions(limit?: number): Promise<ConfigVersionRecord[]>;

  appendAudit(rec: Omit<AuditRecord, 'id'>): Promise<AuditRecord>;
  /** Newest first. */
  listAudit(opts?: { limit?: number; actor?: string }): Promise<AuditRecord[]>;

  putNode(rec: NodeRecord): Promise<void>;
  getNode(nodeID: string): Promise<NodeRecord | undefined>;
  listNodes(): Promise<NodeRecord[]>;
  deleteNode(nodeID: string): Promise<void>;

  /** Inserts or replaces a kept snapshot's record. */
  putSnapshot(rec: SnapshotRecord): Promise<void>;
  getSnapshot(snapshotID: string): Promise<SnapshotRecord | undefined>;
  /** Oldest first. */
  listSnapshots(): Promise<SnapshotRecord[]>;
  /** false when there was none. */
  deleteSnapshot(snapshotID: string): Promise<boolean>;
}

/** Shared filter semantics so every backend answers a ListFilter the same way. */
export function matchesFilter(rec: SandboxRecord, f: ListFilter = {}): boolean {
  if (f.state && f.state.length > 0 && !f.state.includes(rec.state)) return false;
  if (f.nodeID && rec.nodeID !== f.nodeID) return false;
  if (f.templateID && rec.templateID !== f.templateID) return false;
  if (f.metadata) for (const [k, v] of Object.entries(f.metadata)) if (rec.metadata[k] !== v) return false;
  return true;
}

/** The record as a backend stores it: its generation lives beside it (a column), not in it. */
export function recordJson(rec: SandboxRecord): string {
  const { generation: _g, ...rest } = rec;
  return JSON.stringify(rest);
}
