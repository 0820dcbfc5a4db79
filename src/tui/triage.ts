// Which bottleneck is active on which node, with the numbers that prove it and the fix.
// Pure: nodes, the create stats and the config's CPU cap in, findings out. Everything it
// reads is windowed (creates refused in the last minute; pool waits and on-demand
// allocations in the last 5 minutes, host CPU averaged over about 30 s), so a problem that
// is over stops showing without a restart.
import type { NodeView, StatsView } from '../api/types.js';

type PoolView = NodeView['pool'];
import { mib, millis, percent, storeFree } from './format.js';

export type Bottleneck = 'creates-refused' | 'cpu-starvation' | 'memory-oversell' | 'disk-watermark' | 'nic-stall' | 'tap-stall';

export const BOTTLENECK_TITLES: Record<Bottleneck, string> = {
  'creates-refused': 'creates refused',
  'cpu-starvation': 'CPU starvation',
  'memory-oversell': 'memory oversell cashed in',
  'disk-watermark': 'disk watermark',
  'nic-stall': 'NIC allocation stall',
  'tap-stall': 'microVM TAP pool stall',
};

export interface Finding {
  /** The node, or `all` for what the control plane sees across nodes (refused creates). */
  nodeID: string;
  bottleneck: Bottleneck;
  /** warn: approaching or partly there; bad: active and hurting. */
  severity: 'warn' | 'bad';
  evidence: string;
  /** What the operator does about it, naming the key or config field (and whether it needs a restart). */
  fix: string;
}

export interface TriageContext {
  stats?: StatsView | null;
  /** scheduler.node_max_cpu_util in force (percent). */
  cpuCapPercent?: number;
}

/** Host MemAvailable below this share of the host's MemTotal means oversold memory is being used for real. */
export const MEM_AVAILABLE_LOW = 0.1;
/** Disk within this many points of the watermark is worth a warning. */
export const DISK_NEAR_POINTS = 5;
/** An allocation wait p99 at or above this means creates queue on the NIC pool. */
export const NIC_WAIT_P99_MS = 100;
/** Host CPU within this many points of the cap: creates slow down before the cpu filter refuses them. */
export const CPU_NEAR_POINTS = 10;
/** The default of scheduler.node_max_cpu_util, when the config has not arrived. */
const DEFAULT_CPU_CAP = 80;

/** What to do about creates refused by each rule (the names are the scheduler's filters). */
const REFUSAL_FIX: Record<string, string> = {
  cpu: 'find what burns host CPU; cordon the node or raise scheduler.node_max_cpu_util (live)',
  mem: 'the memory ceiling is reached: destroy or pause sandboxes, or raise host.quota.paused_resource_release_ratio (r, live) if MemAvailable allows',
  disk: 'free disk under the data dir or move scheduler.disk_usage_max_percent (live)',
  pool: 'raise network tap_init_num in cubelet.toml (restart needed)',
  realtime_create_num: 'creates are bursting past scheduler.realtime_create_num: slow the client or raise it (live)',
  mvm_num: 'the sandbox cap is reached: raise scheduler.node_max_mvm_num (live) or add a node',
  template_locality: 'the template is not on any schedulable node: build or import it there',
  prefilter: 'every node is cordoned, draining, lost or silent: uncordon (u) or bring a node back',
  release_ratio: 'resumes need the memory the release ratio gave away: lower host.quota.paused_resource_release_ratio (r) or free memory',
};

function createsRefused(stats: StatsView | null | undefined): Finding | null {
  const refused = stats?.refusedLastMinute ?? [];
  const total = refused.reduce((a, r) => a + r.count, 0);
  if (total === 0) return null;
  const top = refused[0]!;
  return {
    nodeID: 'all',
    bottleneck: 'creates-refused',
    severity: 'bad',
    evidence: `${total} refused in the last minute: ${refused.map((r) => `${r.code} ${r.rule} x${r.count}`).join(', ')}`,
    fix: REFUSAL_FIX[top.rule] ?? `see the ${top.code} events (4 events view)`,
  };
}

function cpuStarvation(n: NodeView, cap: number): Finding | null {
  const host = n.usage.cpuUtilPercent;
  // What the cpu filter gates on: the sandboxes' own CPU where the node reports it, else the host's.
  const sbx = n.usage.sandboxCpuUtilPercent;
  const gate = sbx ?? host;
  if (gate >= cap) {
    return {
      nodeID: n.nodeID,
      bottleneck: 'cpu-starvation',
      severity: 'bad',
      evidence: `${sbx === undefined ? 'host cpu' : 'sandbox cpu use'} ${percent(gate)} >= node_max_cpu_util ${percent(cap)}: the cpu filter refuses every create here`,
      fix: REFUSAL_FIX.cpu!,
    };
  }
  if (host < cap - CPU_NEAR_POINTS) return null;
  return {
    nodeID: n.nodeID,
    bottleneck: 'cpu-starvation',
    severity: 'warn',
    evidence: `host cpu ${percent(host)}${sbx === undefined ? '' : ` (sandboxes ${percent(sbx)})`}, node_max_cpu_util ${percent(cap)}: creates and exec slow down`,
    fix: REFUSAL_FIX.cpu!,
  };
}

function memoryOversell(n: NodeView): Finding | null {
  const live = n.sandboxes.running + n.sandboxes.paused;
  const safe = n.density.safetyBoundary;
  if (live <= safe) return null;
  const avail = n.usage.memAvailableMiB;
  // The host's real MemTotal: the declared quota can exceed it (182% was shown against a quota).
  const total = n.usage.memTotalMiB ?? n.capacity.memoryMiB;
  const share = total > 0 ? avail / total : 1;
  const low = share < MEM_AVAILABLE_LOW;
  const full = n.density.headroom <= 0;
  return {
    nodeID: n.nodeID,
    bottleneck: 'memory-oversell',
    severity: low || full ? 'bad' : 'warn',
    evidence: `${live} live > ${safe} safe (ceiling ${n.density.effectiveCeiling}, headroom ${n.density.headroom}); MemAvailable ${mib(avail)} = ${percent(share * 100)} of ${mib(total)}${low ? ' (low)' : ''}`,
    fix: low
      ? 'lower host.quota.paused_resource_release_ratio (r, live) so paused sandboxes keep their memory, and drain (d) what does not fit'
      : 'watch MemAvailable; lower host.quota.paused_resource_release_ratio (r, live) before it runs low',
  };
}

function diskWatermark(n: NodeView): Finding | null {
  const { diskUsedPercent: used, diskWatermarkPercent: mark } = n.usage;
  if (used < mark - DISK_NEAR_POINTS) return null;
  const over = used >= mark;
  return {
    nodeID: n.nodeID,
    bottleneck: 'disk-watermark',
    severity: over ? 'bad' : 'warn',
    evidence:
      (over
        ? `disk ${Math.round(used)}% >= watermark ${mark}%: healthy but takes no new sandboxes`
        : `disk ${Math.round(used)}%, watermark ${mark}% (${Math.round(mark - used)} points left)`) +
      (n.usage.store ? `; sandbox store ${storeFree(n)} free` : ''),
    fix: REFUSAL_FIX.disk!,
  };
}

/**
 * Creates waiting on a slot pool: the ns pool (`pool`, tap_init_num) or, on a node offering
 * microvm, the microVMs' TAP pool (`tapPool`, microvm_tap_init_num), which triage left out.
 */
function poolStall(n: NodeView, p: PoolView | undefined, bottleneck: 'nic-stall' | 'tap-stall', key: string): Finding | null {
  if (!p) return null;
  const empty = p.free === 0 && p.total > 0;
  const waiting = p.inFlight > 0;
  const slow = p.waitP99Ms >= NIC_WAIT_P99_MS;
  const onDemand = p.onDemandRecent ?? 0;
  if (!(slow || (empty && waiting) || onDemand > 0)) return null;
  return {
    nodeID: n.nodeID,
    bottleneck,
    severity: (empty && waiting) || slow ? 'bad' : 'warn',
    evidence: `${bottleneck === 'tap-stall' ? 'TAP pool' : 'pool'} ${p.free}/${p.total} free, ${p.inFlight} waiting, ${p.onDemandRecent === undefined ? `${p.onDemand} on-demand since start` : `${onDemand} on-demand in 5m`}, wait p99 ${millis(p.waitP99Ms)} (p50 ${millis(p.waitP50Ms)})`,
    fix: `raise network ${key} in cubelet.toml above ${p.target} (restart needed)`,
  };
}

/** Findings, worst first, then by node. */
export function triage(nodes: readonly NodeView[], ctx: TriageContext = {}): Finding[] {
  const cap = ctx.cpuCapPercent ?? DEFAULT_CPU_CAP;
  const out: Finding[] = [];
  const refused = createsRefused(ctx.stats);
  if (refused) out.push(refused);
  for (const n of nodes) {
    for (const f of [
      cpuStarvation(n, cap),
      memoryOversell(n),
      diskWatermark(n),
      poolStall(n, n.pool, 'nic-stall', 'tap_init_num'),
      poolStall(n, n.tapPool, 'tap-stall', 'microvm_tap_init_num'),
    ])
      if (f) out.push(f);
  }
  return out.sort((a, b) => (a.severity === b.severity ? a.nodeID.localeCompare(b.nodeID) : a.severity === 'bad' ? -1 : 1));
}
