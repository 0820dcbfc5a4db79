// The cluster's view of one node (pure): the node's last heartbeat as it reported it, with the
// registry's operator flags, its RPC address, and the control plane's verdict on its health
// (a stale heartbeat or a lost marker makes it UNHEALTHY and unschedulable, never absent).
import type { NodeView } from '../../api/types.js';
import { withOperatorFlags } from '../../cubelet/node-view.js';
import type { NodeRecord } from '../../store/types.js';
import { footprintMiB, type DensityParams } from '../density.js';

/** A placement this replica made; `at` is when the node answered (Infinity while the create runs). */
export interface RecentPlacement {
  nodeID: string;
  cpus: number;
  memoryMiB: number;
  /**
   * When the node started counting it, in the NODE's clock (the sandbox's startedAt, stamped
   * where its heartbeat's lastSeen is): a heartbeat stamped later includes it. Infinity until
   * the node answered.
   */
  at: number;
}

/** Each node's last heartbeat time (ms), built once per set of views: placements look it up per create. */
export function lastSeenByNode(views: readonly Pick<NodeView, 'nodeID' | 'lastSeen'>[]): Map<string, number> {
  return new Map(views.map((n) => [n.nodeID, Date.parse(n.lastSeen)]));
}

/** The placements no heartbeat shows yet (pure): those a node reported after, or older than any heartbeat could be, are done. */
export function pendingPlacements(recent: readonly RecentPlacement[], lastSeen: ReadonlyMap<string, number>, now: number): RecentPlacement[] {
  const horizon = now - 60_000;
  return recent.filter((p) => p.at > horizon && !((lastSeen.get(p.nodeID) ?? Infinity) > p.at));
}

/**
 * Views with this replica's placements that each node's last heartbeat predates added in (pure):
 * a node reports once a second, and without this a burst would pile onto the nodes that looked
 * emptiest at the last heartbeat. Views without such placements are returned as they are (the
 * same objects: this runs per create over every node).
 */
export function withRecentPlacements(views: NodeView[], recent: readonly RecentPlacement[], params: DensityParams): NodeView[] {
  if (recent.length === 0) return views;
  const byNode = new Map<string, RecentPlacement[]>();
  for (const p of recent) {
    const list = byNode.get(p.nodeID);
    if (list) list.push(p);
    else byNode.set(p.nodeID, [p]);
  }
  return views.map((v) => {
    const mine = byNode.get(v.nodeID);
    if (mine === undefined) return v;
    const seen = Date.parse(v.lastSeen);
    const extra = mine.filter((p) => !(seen > p.at));
    if (extra.length === 0) return v;
    const mem = extra.reduce((s, p) => s + footprintMiB(p, params), 0);
    const cpus = extra.reduce((s, p) => s + p.cpus, 0);
    return {
      ...v,
      usage: { ...v.usage, quotaMemUsedMiB: v.usage.quotaMemUsedMiB + mem, quotaCpuUsed: v.usage.quotaCpuUsed + cpus },
      sandboxes: { ...v.sandboxes, creating: v.sandboxes.creating + extra.length, total: v.sandboxes.total + extra.length },
    };
  });
}

export function clusterNodeView(rec: NodeRecord, metrics: NodeView | undefined, lost: boolean, now: number, heartbeatTimeoutMs: number): NodeView {
  const flagged = withOperatorFlags(metrics ?? silentNode(rec), rec);
  const base: NodeView = rec.evictAt !== undefined && rec.draining ? { ...flagged, evictAt: rec.evictAt, reason: flagged.reason === 'draining' ? `draining: sandboxes evicted at ${rec.evictAt}` : flagged.reason } : flagged;
  const view: NodeView = rec.address !== undefined ? { ...base, address: rec.address } : base;
  const age = metrics ? now - Date.parse(metrics.lastSeen) : Infinity;
  if (!lost && age <= heartbeatTimeoutMs) return view;
  const since = Number.isFinite(age) ? `last heartbeat ${(age / 1000).toFixed(1)}s ago` : 'no heartbeat on record';
  return { ...view, healthy: false, lost, schedulable: false, reason: `${lost ? 'lost' : 'heartbeat stale'}: ${since}` };
}

/** A registered node whose metrics are gone (expired or never sent): everything zero. */
function silentNode(rec: NodeRecord): NodeView {
  return {
    nodeID: rec.nodeID,
    healthy: false,
    schedulable: false,
    reason: '',
    cordoned: false,
    draining: false,
    lost: false,
    runtime: 'unknown',
    capacity: { cpus: 0, memoryMiB: 0, declared: false },
    usage: { cpuUtilPercent: 0, memAvailableMiB: 0, diskUsedPercent: 0, diskWatermarkPercent: 0, quotaMemUsedMiB: 0, quotaCpuUsed: 0 },
    sandboxes: { running: 0, paused: 0, creating: 0, total: 0 },
    density: { footprintMiB: 0, paperCeiling: 0, safetyBoundary: 0, cpuCeiling: 0, effectiveCeiling: 0, bottleneck: 'memory', allPausedCeiling: 0, releaseRatio: 0, headroom: 0, releasedMiB: 0 },
    pool: { free: 0, inUse: 0, creating: 0, total: 0, target: 0, inFlight: 0, onDemand: 0, waitP50Ms: 0, waitP99Ms: 0, recentWaitsMs: [] },
    templates: [],
    lastSeen: rec.joinedAt,
  };
}
