// The admin API's wire model: what /admin/v1/* returns and what the watch stream carries.
// cubectl and cubectl-tui import these types (types only) and nothing else from the daemon.

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
  /** ISO 8601. */
  startedAt: string;
  /** ISO 8601: when the sandbox will be killed unless its timeout is extended. */
  endAt: string;
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
  /** ISO 8601. */
  createdAt: string;
}

export type SnapshotKeeps = 'filesystem' | 'filesystem+memory';

/** E2B's lifecycle: pause instead of kill at the timeout, and resume on the first request that reaches it. */
export interface SandboxLifecycle {
  onTimeout: 'kill' | 'pause';
  autoResume: boolean;
}

export interface DensityView {
  /** Per-sandbox footprint of the default spec, MiB (memory + base + memory/coefficient). */
  footprintMiB: number;
  paperCeiling: number;
  safetyBoundary: number;
  cpuCeiling: number;
  effectiveCeiling: number;
  bottleneck: 'memory' | 'cpu';
  /** Ceiling if every sandbox were paused, for the release ratio in force. */
  allPausedCeiling: number;
  releaseRatio: number;
  /** Sandboxes of the default spec that still fit, given live running/paused counts. */
  headroom: number;
  /** Memory MiB the release ratio currently frees from paused sandboxes. */
  releasedMiB: number;
  /** The memory quota the footprints count against (capacity less the reserve, times the oversell factor); absent from older nodes. */
  memQuotaMiB?: number;
  /** Footprints and vCPUs of the paused sandboxes at their own specs: with the usage figures, what any other ratio gives (the console's ratio preview). */
  pausedFootprintMiB?: number;
  pausedCpus?: number;
}

export interface PoolView {
  free: number;
  inUse: number;
  creating: number;
  total: number;
  target: number;
  /** Allocations currently waiting for a slot. */
  inFlight: number;
  /** Allocations served by creating a slot on demand because the pool was empty. */
  onDemand: number;
  /** The same over the last 5 minutes (the waits' percentiles cover that window too); absent from older nodes. */
  onDemandRecent?: number;
  waitP50Ms: number;
  waitP99Ms: number;
  /** Recent allocation waits in ms, oldest first (for a sparkline), at most 32. */
  recentWaitsMs: number[];
}

/** The sandbox store of a node (src/storage/btrfs-store.ts). */
export interface StoreView {
  /** 'btrfs': the data dir's own filesystem; 'loop': a sparse image under the data dir. */
  kind: 'btrfs' | 'loop';
  /** Its mount point on the node (<data-dir>/store). */
  path: string;
  sizeBytes: number;
  freeBytes: number;
  /** As df computes it: used / (used + available). */
  usedPercent: number;
}

export interface PauseOptions {
  /**
   * Free the sandbox's memory where the runtime can (microvm: guest memory written to a file
   * under the data dir and QEMU ended; resume restores it). Runtimes whose pause keeps the
   * memory (ns: a frozen cgroup) ignore it. AutoPause and the E2B pause ask for it.
   */
  release?: boolean;
}

/** A runtime a node offers. */
export interface RuntimeInfo {
  name: string;
  /** No usable hardware virtualisation: the guest CPU is emulated (microvm under TCG). */
  emulated?: boolean;
  /**
   * A releasing pause (AutoPause, the E2B pause) frees the sandbox's memory, so the release ratio
   * is backed by memory the host got back; absent: pause keeps the memory and the ratio is accounting only.
   */
  releaseBacked?: boolean;
}

export interface NodeView {
  nodeID: string;
  address?: string;
  healthy: boolean;
  schedulable: boolean;
  /** Why the node is not schedulable ('' when it is), in the scheduler's words: e.g. "disk 83% >= 80%". */
  reason: string;
  /** The scheduler rule that refuses the default spec here (a filter name, 'prefilter', 'pool'); absent when schedulable. */
  refusedBy?: string;
  cordoned: boolean;
  draining: boolean;
  /** ISO 8601: a pending `drain --evict` destroys the node's sandboxes at this time (cluster: kept in the store, carried out by any replica). */
  evictAt?: string;
  lost: boolean;
  /** The node's default runtime. */
  runtime: string;
  /** Every runtime the node offers (a create may name one). */
  runtimes?: RuntimeInfo[];
  capacity: { cpus: number; memoryMiB: number; declared: boolean };
  usage: {
    /** The whole host's CPU use, percent (everything on the machine). */
    cpuUtilPercent: number;
    /** What the node's sandboxes use (their cgroups), percent of the node's CPUs; the cpu filter gates on it. Absent from nodes that cannot tell: the host figure applies. */
    sandboxCpuUtilPercent?: number;
    memAvailableMiB: number;
    /** The host's real MemTotal (capacity.memoryMiB may be a declared quota); absent from older nodes. */
    memTotalMiB?: number;
    /** Of the sandbox store (and of the data dir's filesystem holding its image, whichever is fuller): what the disk filter compares with the watermark. */
    diskUsedPercent: number;
    diskWatermarkPercent: number;
    /** The store of sandbox writable layers (src/storage/); absent on runtimes without one. */
    store?: StoreView;
    /** Sum of spec memory / cpus over running sandboxes and (1 - r) of paused ones. */
    quotaMemUsedMiB: number;
    quotaCpuUsed: number;
  };
  sandboxes: { running: number; paused: number; creating: number; total: number };
  density: DensityView;
  pool: PoolView;
  /** The TAP pool: network slots made with a TAP for microVMs, on a node offering the microvm runtime (pool is the ns runtime's). */
  tapPool?: PoolView;
  templates: string[];
  /** Templates whose sandboxes run on a runtime of their own when the create names none: name -> runtime. */
  templateRuntimes?: Record<string, string>;
  /**
   * Cluster compute nodes: the layer digests in the node's store and its template fetches in
   * progress ("NAME:TAG done/of" layers). A node that reports `layers` fetches the templates it
   * lacks from the control plane (cubelet/layer-fetch.ts), so template_locality lets it take them.
   */
  layers?: string[];
  fetching?: string[];
  /** ISO 8601 of the last heartbeat/metrics update. */
  lastSeen: string;
  /** Cluster: the version of the cluster's config the node runs (taken from the control plane with its heartbeat answers); absent until it took one. */
  configVersion?: number;
}

export type EventKind =
  | 'sandbox.created'
  | 'sandbox.destroyed'
  | 'sandbox.paused'
  | 'sandbox.resumed'
  | 'sandbox.error'
  | 'sandbox.oom'
  | 'sandbox.timeout'
  | 'sandbox.network'
  | 'sandbox.snapshot'
  | 'schedule.failed'
  | 'config.reloaded'
  | 'config.rejected'
  | 'node.cordoned'
  | 'node.uncordoned'
  | 'node.draining'
  | 'node.lost'
  | 'node.joined'
  | 'node.deleted'
  | 'pool.exhausted'
  | 'template.fetch';

export interface EventView {
  id: number;
  /** ISO 8601. */
  at: string;
  kind: EventKind;
  nodeID?: string;
  sandboxID?: string;
  /** 1305xx code for failures. */
  code?: number;
  message: string;
  /** Milliseconds the operation took (creates, destroys, pauses). */
  durationMs?: number;
}

export interface ConfigChange {
  path: string;
  from: unknown;
  to: unknown;
  needsRestart: boolean;
}

export interface ConfigView {
  version: number;
  /** ISO 8601. */
  loadedAt: string;
  master: unknown;
  cubelet: unknown;
  files: { master: string; cubelet: string };
  /** Set while the files on disk are rejected (the version above stays in force); cleared when they validate again. */
  rejected?: { at: string; errors: { path: string; message: string }[] };
  /**
   * Values in force that are not the files': daemon flags (`--listen`, `--data-dir`, `--node-id`,
   * `--sandbox-domain`, `--runtime`) and what the daemon worked out (the address it listens on,
   * the host name as node id). Paths as the console shows them: `master.api.listen`.
   */
  overrides?: ConfigOverride[];
  /** Paths (`master.api.listen`) the files on disk set; the other keys are the schema's defaults. Absent where the config came from a cluster store. */
  inFile?: string[];
}

export interface ConfigOverride {
  path: string;
  value: unknown;
  /** Where the value came from: the flag (`--listen`), or `listening` / `host name` for what the daemon found. */
  from: string;
}

export interface ReloadResult {
  ok: boolean;
  version: number;
  changes: ConfigChange[];
  /** Set when the new file was rejected; the old config stays in force. */
  error?: { path: string; message: string }[];
}

export interface StatsView {
  /** Creates in the last 60 s. */
  createsLastMinute: number;
  createRatePerSec: number;
  createP99Ms: number;
  createP50Ms: number;
  /** Placement decisions (the scheduler pipeline over every node's view) in the last 60 s; absent where no decision was timed. */
  decisionsLastMinute?: number;
  decisionP50Ms?: number;
  decisionP99Ms?: number;
  /** Creates and resumes refused in the last 60 s, by code and by the rule that refused (a filter name, 'pool', 'release_ratio'). */
  refusedLastMinute?: { code: number; rule: string; count: number }[];
  /** The same counted since this process started (cubed_refused_total on /metrics). */
  refusedSinceStart?: { code: number; rule: string; count: number }[];
}

export interface Snapshot {
  nodes: NodeView[];
  sandboxes: SandboxView[];
  events: EventView[];
  config: ConfigView;
  stats: StatsView;
}

/** One message of GET /admin/v1/watch (server-sent events; `event:` is the type). */
export type WatchMessage =
  | { type: 'snapshot'; snapshot: Snapshot }
  | { type: 'node'; node: NodeView }
  | { type: 'node.removed'; nodeID: string }
  | { type: 'sandbox'; sandbox: SandboxView }
  | { type: 'sandbox.removed'; sandboxID: string }
  | { type: 'event'; event: EventView }
  | { type: 'config'; config: ConfigView; changes: ConfigChange[] }
  | { type: 'stats'; stats: StatsView };
