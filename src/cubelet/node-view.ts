// The node as the admin API shows it, computed from plain inputs (pure): capacity, usage,
// density for the default spec with live counts, and the one refusal only the node can see.
import type { MasterConfig } from '../config/schema.js';
import { computeDensity, densityParamsFromConfig, footprintMiB, headroomFromUsage, type DensityParams } from '../model/density.js';
import { POOL_EXHAUSTED, type NodeView, type PoolView, type RuntimeInfo, type StoreView, type WarmView } from '../model/node.js';
import type { SandboxSpecView, SandboxState } from '../model/sandbox.js';
import type { TemplateRef } from '../runtime/types.js';

export interface NodeViewInputs {
  nodeID: string;
  runtime: string;
  runtimes?: RuntimeInfo[];
  capacity: { cpus: number; memoryMiB: number; declared: boolean };
  cpuUtilPercent: number;
  /** The node's sandboxes' CPU use in percent of its CPUs, when the driver can tell. */
  sandboxCpuUtilPercent?: number;
  memAvailableMiB: number;
  /** The host's MemTotal (what MemAvailable is a share of). */
  memTotalMiB?: number;
  /** Used percent of the data dir's filesystem. */
  diskUsedPercent: number;
  /** The sandbox store, when the runtime keeps one: the watermark applies to the fuller of it and the data dir. */
  store?: StoreView;
  master: MasterConfig;
  sandboxes: { state: SandboxState; spec: SandboxSpecView }[];
  pool: PoolView;
  /** The TAP-mode pool (microVMs' slots), on a node offering the microvm runtime. */
  tapPool?: PoolView;
  /** Slots the node's address range can hold at most (the pools of every mode share it). */
  poolSlotLimit: number;
  templates: string[];
  templateRuntimes?: Record<string, string>;
  /** A node that fetches missing templates (cluster compute): the layers it holds, the fetches in progress. */
  layerFacts?: { layers: string[]; fetching: string[] };
  /** The warm pools (not in `sandboxes`); absent or without templates: none. */
  warm?: WarmView;
  now: Date;
}

// States that hold a sandbox's full resources; paused ones hold (1 - r).
const HOLDING: readonly SandboxState[] = ['creating', 'running', 'pausing', 'resuming'];

/** What sandboxes hold of the node by the density rules (pure): running ones in full, paused ones (1 - r). */
export function heldBy(sandboxes: readonly { state: SandboxState; spec: SandboxSpecView }[], params: DensityParams) {
  const r = params.releaseRatio;
  let memUsed = 0;
  let cpuUsed = 0;
  let released = 0;
  let pausedFootprint = 0;
  let pausedCpus = 0;
  // Disk quotas hold in full while the layer exists: a paused sandbox keeps its layer.
  let diskUsed = 0;
  const counts = { running: 0, paused: 0, creating: 0, total: 0 };
  for (const s of sandboxes) {
    const fp = footprintMiB(s.spec, params);
    if (HOLDING.includes(s.state) || s.state === 'paused') diskUsed += s.spec.diskGiB;
    if (HOLDING.includes(s.state)) {
      memUsed += fp;
      cpuUsed += s.spec.cpus;
    } else if (s.state === 'paused') {
      memUsed += fp * (1 - r);
      cpuUsed += s.spec.cpus * (1 - r);
      released += fp * r;
      pausedFootprint += fp;
      pausedCpus += s.spec.cpus;
    }
    if (s.state === 'running') counts.running++;
    else if (s.state === 'paused') counts.paused++;
    else if (s.state === 'creating') counts.creating++;
    if (s.state !== 'gone') counts.total++;
  }
  return { memUsed, cpuUsed, released, pausedFootprint, pausedCpus, diskUsed, counts };
}

export function buildNodeView(i: NodeViewInputs): NodeView {
  const params = densityParamsFromConfig(i.master);
  const spec = { cpus: i.master.sandbox.default_spec.cpus, memoryMiB: i.master.sandbox.default_spec.memory_mib };
  const r = params.releaseRatio;
  const { memUsed, cpuUsed, released, pausedFootprint, pausedCpus, diskUsed, counts } = heldBy(i.sandboxes, params);
  const d = computeDensity(i.capacity, params, spec);
  const h = headroomFromUsage(i.capacity, params, spec, { memUsedMiB: memUsed, cpuUsed, releasedMiB: released, count: counts.total });
  const diskMax = i.master.scheduler.disk_usage_max_percent;
  // The watermark applies to the fuller of the sandbox store and the data dir's filesystem.
  const diskUsedPercent = Math.max(i.diskUsedPercent, i.store?.usedPercent ?? 0);
  // The node reports only what the scheduler's filters cannot see; the control plane puts the
  // pipeline's verdict for the default spec on top (scheduler/schedulable.ts).
  const pools = [i.pool, ...(i.tapPool ? [i.tapPool] : [])];
  const reason = pools.every((p) => p.free === 0) && pools.reduce((n, p) => n + p.total, 0) >= i.poolSlotLimit ? POOL_EXHAUSTED : '';
  return {
    nodeID: i.nodeID,
    healthy: true,
    schedulable: reason === '',
    reason,
    cordoned: false,
    draining: false,
    lost: false,
    runtime: i.runtime,
    ...(i.runtimes ? { runtimes: i.runtimes } : {}),
    capacity: i.capacity,
    usage: {
      cpuUtilPercent: round1(i.cpuUtilPercent),
      ...(i.sandboxCpuUtilPercent !== undefined ? { sandboxCpuUtilPercent: round1(i.sandboxCpuUtilPercent) } : {}),
      memAvailableMiB: i.memAvailableMiB,
      ...(i.memTotalMiB !== undefined ? { memTotalMiB: i.memTotalMiB } : {}),
      diskUsedPercent,
      diskWatermarkPercent: diskMax,
      ...(i.store ? { store: i.store } : {}),
      quotaMemUsedMiB: round1(memUsed),
      quotaCpuUsed: round1(cpuUsed),
      quotaDiskUsedGiB: round1(diskUsed),
    },
    sandboxes: counts,
    density: {
      footprintMiB: round1(d.footprintMiB),
      paperCeiling: d.paperCeiling,
      safetyBoundary: d.safetyBoundary,
      cpuCeiling: d.cpuCeiling,
      effectiveCeiling: d.effectiveCeiling,
      bottleneck: d.bottleneck,
      allPausedCeiling: d.allPausedCeiling,
      releaseRatio: r,
      headroom: h.headroom,
      releasedMiB: round1(released),
      memQuotaMiB: round1(d.memQuotaMiB),
      pausedFootprintMiB: round1(pausedFootprint),
      pausedCpus: round1(pausedCpus),
      ...(i.store ? { diskQuotaGiB: round1((i.store.sizeBytes / 1024 ** 3) * i.master.host.quota.disk_oversell_ratio) } : {}),
    },
    pool: i.pool,
    ...(i.tapPool ? { tapPool: i.tapPool } : {}),
    templates: i.templates,
    ...(i.templateRuntimes && Object.keys(i.templateRuntimes).length ? { templateRuntimes: i.templateRuntimes } : {}),
    ...(i.layerFacts ? { layers: i.layerFacts.layers, ...(i.layerFacts.fetching.length ? { fetching: i.layerFacts.fetching } : {}) } : {}),
    ...(i.warm && (Object.keys(i.warm.templates).length || i.warm.hits || i.warm.misses) ? { warm: i.warm } : {}),
    ...seenAt(i.now),
  };
}

/** A view's time stamp: when the node answered (the one place that says how it is written). */
export const seenAt = (now: Date): Pick<NodeView, 'lastSeen'> => ({ lastSeen: now.getTime() });

const round1 = (x: number) => Math.round(x * 10) / 10;

/**
 * The node's own view (built with no operator flags) with the registry's cordon/drain applied:
 * those flags live in the state store, not on the node.
 */
export function withOperatorFlags(v: NodeView, flags: { cordoned: boolean; draining: boolean }): NodeView {
  const reason = flags.cordoned ? 'cordoned' : flags.draining ? 'draining' : v.reason;
  return { ...v, cordoned: flags.cordoned, draining: flags.draining, reason, schedulable: reason === '' };
}

/** The node view's template names, and the default runtime of those that name one (pure). */
export function templateFacts(templates: TemplateRef[]): { templates: string[]; templateRuntimes: Record<string, string> } {
  return {
    templates: templates.map((t) => t.name),
    templateRuntimes: Object.fromEntries(templates.flatMap((t) => (t.config?.runtime ? [[t.name, t.config.runtime]] : []))),
  };
}
