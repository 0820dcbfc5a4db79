// The node as the admin API shows it, computed from plain inputs (pure): capacity, usage,
// density for the default spec with live counts, and whether the node takes new sandboxes.
import type { NodeView, PoolView, SandboxSpecView, SandboxState, StoreView } from '../api/types.js';
import type { MasterConfig } from '../config/schema.js';
import { computeDensity, densityParamsFromConfig, footprintMiB, headroomFromUsage } from '../scheduler/density.js';

export interface NodeViewInputs {
  nodeID: string;
  runtime: string;
  runtimes?: { name: string; emulated?: boolean }[];
  capacity: { cpus: number; memoryMiB: number; declared: boolean };
  cpuUtilPercent: number;
  /** The node's sandboxes' CPU use in percent of its CPUs, when the driver can tell. */
  sandboxCpuUtilPercent?: number;
  memAvailableMiB: number;
  /** Used percent of the data dir's filesystem. */
  diskUsedPercent: number;
  /** The sandbox store, when the runtime keeps one: the watermark applies to the fuller of it and the data dir. */
  store?: StoreView;
  master: MasterConfig;
  sandboxes: { state: SandboxState; spec: SandboxSpecView }[];
  pool: PoolView;
  /** Slots the node's address range can hold at most. */
  poolSlotLimit: number;
  templates: string[];
  now: Date;
}

// States that hold a sandbox's full resources; paused ones hold (1 - r).
const HOLDING: readonly SandboxState[] = ['creating', 'running', 'pausing', 'resuming'];

export function buildNodeView(i: NodeViewInputs): NodeView {
  const params = densityParamsFromConfig(i.master);
  const spec = { cpus: i.master.sandbox.default_spec.cpus, memoryMiB: i.master.sandbox.default_spec.memory_mib };
  const r = params.releaseRatio;
  let memUsed = 0;
  let cpuUsed = 0;
  let released = 0;
  const counts = { running: 0, paused: 0, creating: 0, total: 0 };
  for (const s of i.sandboxes) {
    const fp = footprintMiB(s.spec, params);
    if (HOLDING.includes(s.state)) {
      memUsed += fp;
      cpuUsed += s.spec.cpus;
    } else if (s.state === 'paused') {
      memUsed += fp * (1 - r);
      cpuUsed += s.spec.cpus * (1 - r);
      released += fp * r;
    }
    if (s.state === 'running') counts.running++;
    else if (s.state === 'paused') counts.paused++;
    else if (s.state === 'creating') counts.creating++;
    if (s.state !== 'gone') counts.total++;
  }
  const d = computeDensity(i.capacity, params, spec);
  const h = headroomFromUsage(i.capacity, params, spec, { memUsedMiB: memUsed, cpuUsed, releasedMiB: released, count: counts.total });
  const diskMax = i.master.scheduler.disk_usage_max_percent;
  const diskUsed = Math.max(i.diskUsedPercent, i.store?.usedPercent ?? 0);
  const reason = unschedulableReason({
    diskUsedPercent: diskUsed,
    diskMaxPercent: diskMax,
    poolExhausted: i.pool.free === 0 && i.pool.total >= i.poolSlotLimit,
    headroom: h.headroom,
    limitedBy: h.limitedBy,
    ceiling: d.effectiveCeiling,
  });
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
      diskUsedPercent: diskUsed,
      diskWatermarkPercent: diskMax,
      ...(i.store ? { store: i.store } : {}),
      quotaMemUsedMiB: round1(memUsed),
      quotaCpuUsed: round1(cpuUsed),
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
    },
    pool: i.pool,
    templates: i.templates,
    lastSeen: i.now.toISOString(),
  };
}

const round1 = (x: number) => Math.round(x * 10) / 10;

export interface SchedulabilityInputs {
  diskUsedPercent: number;
  diskMaxPercent: number;
  poolExhausted: boolean;
  headroom: number;
  limitedBy: 'memory' | 'cpu' | 'mvm_num';
  ceiling: number;
}

/** '' when the node takes new sandboxes, else the first reason in the order an operator acts on them (operator flags come on top: withOperatorFlags). */
export function unschedulableReason(s: SchedulabilityInputs): string {
  if (s.diskUsedPercent >= s.diskMaxPercent) return `disk watermark ${s.diskUsedPercent}% >= ${s.diskMaxPercent}%`;
  if (s.poolExhausted) return 'pool exhausted';
  if (s.headroom <= 0) return s.limitedBy === 'mvm_num' ? `sandbox cap reached (${s.ceiling})` : `${s.limitedBy === 'memory' ? 'memory' : 'cpu'} ceiling reached`;
  return '';
}

/**
 * The node's own view (built with no operator flags) with the registry's cordon/drain applied:
 * those flags live in the state store, not on the node.
 */
export function withOperatorFlags(v: NodeView, flags: { cordoned: boolean; draining: boolean }): NodeView {
  const reason = flags.cordoned ? 'cordoned' : flags.draining ? 'draining' : v.reason;
  return { ...v, cordoned: flags.cordoned, draining: flags.draining, reason, schedulable: reason === '' };
}
