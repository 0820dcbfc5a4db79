// Which of the three bottlenecks that look alike from outside is active on which node,
// with the numbers that prove it. Pure: NodeView in, findings out.
import type { NodeView } from '../api/types.js';
import { mib, millis, storeFree } from './format.js';

export type Bottleneck = 'memory-oversell' | 'disk-watermark' | 'nic-stall';

export const BOTTLENECK_TITLES: Record<Bottleneck, string> = {
  'memory-oversell': 'memory oversell cashed in',
  'disk-watermark': 'disk watermark',
  'nic-stall': 'NIC allocation stall',
};

export interface Finding {
  nodeID: string;
  bottleneck: Bottleneck;
  /** warn: approaching or partly there; bad: active and hurting. */
  severity: 'warn' | 'bad';
  evidence: string;
}

/** Host MemAvailable below this share of node memory means oversold memory is being used for real. */
export const MEM_AVAILABLE_LOW = 0.1;
/** Disk within this many points of the watermark is worth a warning. */
export const DISK_NEAR_POINTS = 5;
/** An allocation wait p99 at or above this means creates queue on the NIC pool. */
export const NIC_WAIT_P99_MS = 100;

function memoryOversell(n: NodeView): Finding | null {
  const live = n.sandboxes.running + n.sandboxes.paused;
  const safe = n.density.safetyBoundary;
  if (live <= safe) return null;
  const avail = n.usage.memAvailableMiB;
  const share = n.capacity.memoryMiB > 0 ? avail / n.capacity.memoryMiB : 1;
  const low = share < MEM_AVAILABLE_LOW;
  return {
    nodeID: n.nodeID,
    bottleneck: 'memory-oversell',
    severity: low ? 'bad' : 'warn',
    evidence: `${live} live > ${safe} safe (ceiling ${n.density.paperCeiling}); MemAvailable ${mib(avail)} = ${Math.round(share * 100)}% of ${mib(n.capacity.memoryMiB)}${low ? ' (low)' : ''}`,
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
      (over ? `disk ${Math.round(used)}% >= watermark ${mark}%: healthy but takes no new sandboxes` : `disk ${Math.round(used)}%, watermark ${mark}% (${Math.round(mark - used)} points left)`) +
      (n.usage.store ? `; sandbox store ${storeFree(n)} free` : ''),
  };
}

function nicStall(n: NodeView): Finding | null {
  const p = n.pool;
  const empty = p.free === 0 && p.total > 0;
  const waiting = p.inFlight > 0;
  const slow = p.waitP99Ms >= NIC_WAIT_P99_MS;
  if (!(slow || (empty && waiting))) return null;
  return {
    nodeID: n.nodeID,
    bottleneck: 'nic-stall',
    severity: empty && (waiting || slow) ? 'bad' : 'warn',
    evidence: `pool ${p.free}/${p.total} free, ${p.inFlight} waiting, ${p.onDemand} on-demand, wait p99 ${millis(p.waitP99Ms)} (p50 ${millis(p.waitP50Ms)})`,
  };
}

const RULES = [memoryOversell, diskWatermark, nicStall];

/** Findings, worst first, then by node. */
export function triage(nodes: readonly NodeView[]): Finding[] {
  const out = nodes.flatMap((n) => RULES.map((r) => r(n)).filter((f): f is Finding => f !== null));
  return out.sort((a, b) => (a.severity === b.severity ? a.nodeID.localeCompare(b.nodeID) : a.severity === 'bad' ? -1 : 1));
}
