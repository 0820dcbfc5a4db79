// A node's snapshot as its cubelet reports it (heartbeats, the node RPC) and the control plane
// keeps and shows it: capacity, usage, density, pools, store, runtimes. Its times are epoch ms (time.ts).
import type { Density } from './density.js';
import { epochMs, epochMsOpt } from './time.js';

/** The density model's figures (density.ts) a node reports, with what its live counts make of them. */
export interface DensityView extends Pick<
  Density,
  'footprintMiB' | 'paperCeiling' | 'safetyBoundary' | 'cpuCeiling' | 'effectiveCeiling' | 'bottleneck' | 'allPausedCeiling'
> {
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
  /** The disk quota the sandboxes' disk_gib count against (the store's size times host.quota.disk_oversell_ratio); absent without a store and from older nodes. */
  diskQuotaGiB?: number;
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

/** One scheduler rule's answer for the default spec on a node (NodeView.rules). */
export interface RuleVerdict {
  /** 'prefilter', 'capacity' or a filter name, in the order the pipeline runs them. */
  rule: string;
  /** Why the rule refuses the default spec here; absent when it passes. */
  refusal?: string;
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
  /**
   * A create asking for raw sockets (metadata cube.net_raw=true) is accepted on this runtime:
   * ns where cubelet identity.allow_net_raw is true; microvm always (root of the guest has them in
   * its own kernel). Absent: refused (and from older nodes), so placement keeps such creates off it.
   */
  netRaw?: boolean;
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
  /**
   * Every rule's answer for the default spec here, in the order the pipeline runs them (the
   * pipeline stops at the first refusal; these are all of them): what the console's describe
   * shows. Set by the control plane with its verdict; absent from a node's own report.
   */
  rules?: RuleVerdict[];
  cordoned: boolean;
  draining: boolean;
  /** Epoch ms: a pending `drain --evict` destroys the node's sandboxes at this time (cluster: kept in the store, carried out by any replica). */
  evictAt?: number;
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
    /** Sum of the disk_gib quotas of the sandboxes holding a writable layer (paused ones in full): what the disk_quota filter counts against the store's size; absent from older nodes. */
    quotaDiskUsedGiB?: number;
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
   * lacks from the control plane (templates/fetch.ts), so template_locality lets it take them.
   */
  layers?: string[];
  fetching?: string[];
  /** The node's warm pools (cubelet/warm-pool.ts); absent: none held or wanted. */
  warm?: WarmView;
  /** Epoch ms of the last heartbeat/metrics update (the node's clock). */
  lastSeen: number;
  /** Cluster: the version of the cluster's config the node runs (taken from the control plane with its heartbeat answers); absent until it took one. */
  configVersion?: number;
}

/**
 * Warm pools: started sandboxes of start-command templates waiting for a create of their template
 * (default spec and runtime), which takes one and returns at once. They are left out of
 * `sandboxes`, the quota figures and the headroom: they only hold room real sandboxes leave, and
 * the node destroys them before a create needs it (their memory is in memAvailableMiB all the same).
 */
export interface WarmView {
  /** Per template: ready, being made, and the size wanted (warm_pool). */
  templates: Record<string, { ready: number; starting: number; target: number }>;
  /** Footprint (memory + overhead) the warm sandboxes hold, MiB. */
  footprintMiB: number;
  /** Since the node started: creates of a warmed template that took a warm sandbox (hits) and that found none (misses). */
  hits: number;
  misses: number;
}

/** A node's view whose times may be ISO 8601: as an older version wrote it, or the admin wire. */
export type NodeViewAnyTimes = Omit<NodeView, 'lastSeen' | 'evictAt'> & { lastSeen: number | string; evictAt?: number | string };

/**
 * A node's view read as epoch ms from where its times may be ISO 8601 (an older node's heartbeat, a
 * store's copy an older replica wrote, the admin wire). The same object when they are numbers
 * already (every heartbeat goes through here).
 */
export function nodeWithEpochTimes(v: NodeViewAnyTimes): NodeView {
  const { lastSeen, evictAt, ...rest } = v;
  if (typeof lastSeen === 'number' && typeof evictAt !== 'string') return v as NodeView;
  const ev = epochMsOpt(evictAt);
  return { ...rest, lastSeen: epochMs(lastSeen), ...(ev !== undefined ? { evictAt: ev } : {}) };
}

/** The refusal a node reports for itself when its network pool is out of slots: the scheduler's filters do not see pool levels (admission's refusalOf applies it). */
export const POOL_EXHAUSTED = 'pool exhausted';
