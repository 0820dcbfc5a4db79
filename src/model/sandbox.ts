// The sandbox as every layer sees it: its state, spec and lifecycle, the record the control plane
// keeps (with what only its owner may see), kept snapshots, and the view the admin API answers
// (src/api/types.ts names these as its wire model). A sandbox's times are epoch milliseconds; the
// API writes them as ISO 8601 on its wires (src/api/e2b/wire.ts, src/api/admin/wire.ts).
import { epochMs } from './time.js';
import type { VolumeMount, VolumeMountRequest } from './volume.js';

export const SANDBOX_STATES = ['creating', 'running', 'pausing', 'paused', 'resuming', 'destroying', 'gone', 'error', 'lost'] as const;
export type SandboxState = (typeof SANDBOX_STATES)[number];

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
  /** The volumes mounted in it (a volume in use cannot be deleted). */
  volumes?: VolumeMount[];
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
  /**
   * E2B's traffic access token, when the create asked `allowPublicTraffic: false`: requests to
   * the sandbox's ports other than envd's must carry it (header e2b-traffic-access-token).
   */
  trafficAccessToken?: string;
  envVars: Record<string, string>;
  /** Set by the store: bumped by every write, so a writer can say "only if nobody wrote since I read". */
  generation?: number;
  /**
   * The node's clock (ms) when it answered the control-side operation this record was last
   * written from: a heartbeat list the node took before then is older than the record and must not
   * overwrite it.
   */
  nodeAt?: number;
  /**
   * Epoch ms: the create's deadline. While `creating`, a record still creating after it whose
   * creator no longer holds its lock (the replica died, or the create failed during a store
   * outage) is settled from the node's truth (create-outcomes.ts). An unkeyed create's `running`
   * record carries it too, where the store can hold a record written and not yet answered (the
   * cluster: MySQL has it, the route in Redis is written after): a made sandbox whose record still
   * has it past the deadline was never answered, and is undone (cluster/sandbox-sync.ts).
   */
  createBy?: number;
  /**
   * The create carried an idempotency key: a creator gone before its answer leaves the sandbox
   * for the key's next create to adopt; without one, the create is undone.
   */
  keyed?: boolean;
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
  const { accessToken: _t, trafficAccessToken: _p, envVars: _e, generation: _g, nodeAt: _n, createBy: _c, keyed: _k, ...view } = rec;
  return view;
}

/** A sandbox's own egress rules as a create asks for them; absent fields take the node's default (network/egress.ts resolves them). */
export interface EgressRequest {
  allowInternet?: boolean;
  allowOut?: string[];
  denyOut?: string[];
}

/** A create as the control plane takes it (E2B and admin routes map their bodies to it). */
export interface CreateSandboxRequest {
  /** 'base' or absent means the configured default template. */
  templateID?: string;
  /** Seconds; absent = sandbox.default_timeout_sec. */
  timeoutSec?: number;
  cpus?: number;
  memoryMiB?: number;
  diskGiB?: number;
  metadata?: Record<string, string>;
  envVars?: Record<string, string>;
  /** The sandbox's own egress rules; absent: the node's defaults. */
  egress?: EgressRequest;
  /** What its timeout does; absent: killed. */
  lifecycle?: SandboxLifecycle;
  /** false (E2B network.allowPublicTraffic): its ports other than envd's answer only requests carrying its traffic access token. */
  allowPublicTraffic?: boolean;
  /** Place on this node only (console "launch on the selected node"). */
  nodeID?: string;
  /** Place only on nodes of this runtime driver (ns, microvm, sim). */
  runtime?: string;
  /** Who asked (API key id), for the audit trail. */
  actor?: string;
  /** Set by the control plane for a templateID that names a snapshot: the node starts the writable layer from it. */
  fromSnapshot?: string;
  /** Volumes to mount, by name (E2B volumeMounts): the control plane resolves them and places the sandbox on their node. */
  volumeMounts?: VolumeMountRequest[];
  /** Set by the control plane from volumeMounts. */
  volumes?: VolumeMount[];
  /** The client's idempotency key (header or label cube.idempotency_key): repeats get this create's outcome (control/create-keys.ts). */
  idempotencyKey?: string;
  /** Aborted when the client's connection closes before the answer: a create without a key is then undone. */
  signal?: AbortSignal;
  /**
   * The answer's delivery: an unkeyed create stays marked unanswered (StateStore.markAnswered)
   * until the answer is written. Without it the create counts as answered when it returns.
   */
  answer?: AnswerHook;
}

/** Work that must follow an answer's write in the same turn of the event loop, or its loss. */
export interface AnswerHook {
  /** `sent` runs right after the answer was written to the client's socket; `lost` if the connection closed first. */
  whenSent(sent: () => void, lost: () => void): void;
}

/** The record without the mark of a create not yet answered (`createBy` on a made sandbox): for a writer whose write was answered. */
export function answeredRecord(rec: SandboxRecord): SandboxRecord {
  if (rec.state === 'creating' || rec.createBy === undefined) return rec;
  const { createBy: _c, ...answered } = rec;
  return answered;
}

/** What a record keeps that no node answer carries (its owner's secrets): kept when a node's view is written over it. */
export function secretsOf(rec: SandboxRecord): Pick<SandboxRecord, 'accessToken' | 'trafficAccessToken' | 'envVars'> {
  return {
    accessToken: rec.accessToken,
    envVars: rec.envVars,
    ...(rec.trafficAccessToken !== undefined ? { trafficAccessToken: rec.trafficAccessToken } : {}),
  };
}

/**
 * A sandbox's live use, as its node reads it on request (GET /admin/v1/usage, the console's
 * sandboxes view): cgroup counters and the writable layer's quota-group figure, never a walk of
 * its files. Sizes in bytes.
 */
export interface SandboxUsage {
  sandboxID: string;
  /** CPU used since the node's previous reading, percent of the sandbox's own vCPUs (100 = all busy); absent on the first reading. */
  cpuPercent?: number;
  memoryBytes: number;
  memoryLimitBytes: number;
  /** Processes (and threads) in its pids cgroup. */
  pids: number;
  /** The writable layer's quota-group use, as last sampled (every few seconds); absent: not measured yet or no store. */
  diskUsedBytes?: number;
  diskLimitBytes: number;
  /** Bytes received and sent by the sandbox since its network slot was made (its host-side link's counters); absent where it has none. */
  netRxBytes?: number;
  netTxBytes?: number;
}
