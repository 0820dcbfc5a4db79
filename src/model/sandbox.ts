// The sandbox as every layer sees it: its state, spec and lifecycle, the record the control plane
// keeps (with what only its owner may see), kept snapshots, and the view the admin API answers
// (src/api/types.ts names these as its wire model). A sandbox's times are epoch milliseconds; the
// API writes them as ISO 8601 on its wires (src/api/e2b/wire.ts, src/api/admin/wire.ts).
import { epochMs } from './time.js';

export type SandboxState = 'creating' | 'running' | 'pausing' | 'paused' | 'resuming' | 'destroying' | 'gone' | 'error' | 'lost';

export interface SandboxSpecView {
  cpus: number;
  memoryMiB: number;
  diskGiB: number;
}

export interface SandboxView {
  sandboxID: string;
  templateID: string;
  nodeID: string;
  state: SandboxState;
  /** Why the sandbox is in `error`/`lost`, or the last OOM kill. */
  reason?: string;
  spec: SandboxSpecView;
  metadata: Record<string, string>;
  /** Epoch ms. */
  startedAt: number;
  /** Epoch ms: when the sandbox will be killed unless its timeout is extended. */
  endAt: number;
  /** Address of the sandbox inside the node's private range. */
  ip?: string;
  runtime: string;
  /** What its timeout does (E2B lifecycle); absent: killed. */
  lifecycle?: SandboxLifecycle;
  /** The API key that created it (its id), which api.max_sandboxes_per_key counts against. */
  owner?: string;
  /** Its own egress rules as asked for (absent: the node's defaults). */
  egress?: { allowInternet?: boolean; allowOut?: string[]; denyOut?: string[] };
  /** Bytes its writable layer holds (quota-group exclusive, sampled every few seconds); absent: not measured yet or no store. */
  diskUsedBytes?: number;
}

/**
 * A kept sandbox state (E2B createSnapshot, fork): what a new sandbox made from it starts with.
 * Lives on the node that took it (its store); the record is in the state store.
 */
export interface SnapshotView {
  snapshotID: string;
  /** Names given at create (E2B `name`), for lookup by name. */
  names: string[];
  /** The sandbox it was taken from (it may be gone since). */
  sandboxID: string;
  nodeID: string;
  /** The origin's template: a sandbox made from the snapshot stacks its writable layer on it. */
  templateID: string;
  /** The runtime that took it, which alone can make sandboxes from it. */
  runtime: string;
  /** What it keeps: 'filesystem' (ns: the writable layer, no processes or memory). */
  keeps: SnapshotKeeps;
  spec: SandboxSpecView;
  metadata: Record<string, string>;
  /** Epoch ms. */
  createdAt: number;
}

export type SnapshotKeeps = 'filesystem' | 'filesystem+memory';

/** E2B's lifecycle: pause instead of kill at the timeout, and resume on the first request that reaches it. */
export interface SandboxLifecycle {
  onTimeout: 'kill' | 'pause';
  autoResume: boolean;
}

export interface PauseOptions {
  /**
   * Free the sandbox's memory where the runtime can (microvm: guest memory written to a file
   * under the data dir and QEMU ended; resume restores it). Runtimes whose pause keeps the
   * memory (ns: a frozen cgroup) ignore it. AutoPause and the E2B pause ask for it.
   */
  release?: boolean;
}


export interface SandboxRecord extends SandboxView {
  /** Token the envd protocol checks (X-Access-Token); unique per sandbox. */
  accessToken: string;
  envVars: Record<string, string>;
  /** Set by the store: bumped by every write, so a writer can say "only if nobody wrote since I read". */
  generation?: number;
  /**
   * The node's clock (ms) when it answered the control-side operation this record was last
   * written from: a heartbeat list the node took before then is older than the record and must not
   * overwrite it.
   */
  nodeAt?: number;
}

/** A kept snapshot as the state store holds it: the view and the origin's envVars (its owner's secret). */
export interface SnapshotRecord extends SnapshotView {
  envVars: Record<string, string>;
}

export interface ListFilter {
  state?: SandboxState[];
  metadata?: Record<string, string>;
  nodeID?: string;
  templateID?: string;
}

/**
 * A sandbox read back from where an older version wrote it (a store's record, a node's meta.json, an
 * older node's answer), whose times may still be ISO 8601 strings: read as epoch ms, so a daemon
 * upgraded in place keeps its sandboxes.
 */
export function withEpochTimes<T extends { startedAt: number; endAt: number }>(v: T): T {
  const { startedAt, endAt } = v as { startedAt: number | string; endAt: number | string };
  if (typeof startedAt === 'number' && typeof endAt === 'number') return v;
  return { ...v, startedAt: epochMs(startedAt), endAt: epochMs(endAt) };
}


/** A snapshot record read back from where a version before numeric times wrote its createdAt as ISO 8601 (a store, an older node's answer). */
export function snapshotWithEpochTime<T extends { createdAt: number }>(s: T): T {
  const at = (s as { createdAt: number | string }).createdAt;
  return typeof at === 'number' ? s : { ...s, createdAt: epochMs(at) };
}

/** A record without what only the sandbox's owner may see (token, env). */
export function publicView(rec: SandboxRecord): SandboxView {
  const { accessToken: _t, envVars: _e, generation: _g, nodeAt: _n, ...view } = rec;
  return view;
}
