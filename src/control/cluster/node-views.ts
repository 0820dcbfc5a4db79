// The cluster's view of one node (pure): the node's last heartbeat as it reported it, with the
// registry's operator flags, its RPC address, and the control plane's verdict on its health
// (a stale heartbeat or a lost marker makes it UNHEALTHY and unschedulable, never absent).
import { withOperatorFlags } from '../../cubelet/node-view.js';
import type { NodeView } from '../../model/node.js';
import { isoTime } from '../../model/time.js';
import type { NodeRecord } from '../../store/types.js';
import { footprintMiB, type DensityParams } from '../../model/density.js';
import { prepareNode, type Candidate } from '../../scheduler/plugin.js';

/** A placement this replica made; `at` is when the node answered (Infinity while the create runs). */
export interface RecentPlacement {
  nodeID: string;
  cpus: number;
  memoryMiB: number;
  /** Its disk quota (disk_gib); absent: 0. */
  diskGiB?: number;
  /**
   * When the node started counting it, in the NODE's clock (the sandbox's startedAt, stamped
   * where its heartbeat's lastSeen is): a heartbeat stamped later includes it. Infinity until
   * the node answered. For a removal: when the node stopped counting it.
   */
  at: number;
  /**
   * A sandbox this replica destroyed: taken off its node's view until a view stamped later shows
   * it gone. Without this a view read before a burst of deletes still held them while the creates
   * that replaced them were added: a create-delete loop at c=20 on a 25.6-cpu node was refused
   * about once in 10,000 creates (`cpu quota 25+1 > 25.6`, cubectl bench, role all, load 8).
   */
  removed?: true;
}

/** How long a placement may wait for a heartbeat that shows it: older ones are done whatever the views say. */
const PLACEMENT_HORIZON_MS = 60_000;

/**
 * The nodes placements decide on (Candidates, and their views for admission): the views of the
 * last metrics read with this replica's placements that each node's last heartbeat predates
 * added in (a node reports once a second, and without this a burst would pile onto the nodes that
 * looked emptiest at the last heartbeat). Kept incrementally: a placement touches its node's
 * entry only, a metrics read rebuilds them once. Building the overlay and the candidates for
 * every node per create (two arrays and 1000 objects, plus a pass over every recent placement)
 * allocated ~50 KB per create at 1000 nodes, and the control spent 17% of its CPU in GC.
 * The arrays are updated in place: a decision reads them synchronously, and one that started
 * before a placement sees it.
 */
export class PlacementBook {
  private views: NodeView[] = [];
  private readonly index = new Map<string, number>();
  private overlaid: NodeView[] = [];
  private candidates: Candidate[] = [];
  private readonly pending = new Map<string, RecentPlacement[]>();

  constructor(private readonly params: () => DensityParams) {}

  /** New views (a metrics read): placements that a node's heartbeat now shows, or too old to wait for, are done. */
  setViews(views: NodeView[], now: number): void {
    const before = this.candidates;
    const at = new Map(this.index);
    this.views = views;
    this.index.clear();
    views.forEach((v, i) => this.index.set(v.nodeID, i));
    this.overlaid = views.slice();
    // A read that brings a node's view again (the same object: its metrics did not change) keeps its prepared node.
    this.candidates = views.map((view) => {
      const j = at.get(view.nodeID);
      const prepared = j === undefined ? undefined : before[j]?.prepared;
      return prepared !== undefined && prepared.view === view ? { view, inFlightCreates: 0, prepared } : candidate(view);
    });
    for (const [nodeID, list] of this.pending) {
      const i = this.index.get(nodeID);
      const seen = i === undefined ? Infinity : views[i]!.lastSeen;
      const left = list.filter((p) => p.at > now - PLACEMENT_HORIZON_MS && !(seen > p.at));
      if (left.length === 0) this.pending.delete(nodeID);
      else this.pending.set(nodeID, left);
      this.refresh(nodeID);
    }
  }

  /** The views with the placements added (shared, read-only). */
  nodeViews(): NodeView[] {
    return this.overlaid;
  }

  /** The candidates, with each node's creates in flight (every replica's): a copy of the array, the untouched entries shared. */
  withInFlight(inFlight: ReadonlyMap<string, number>): Candidate[] {
    const out = this.candidates.slice();
    for (const [nodeID, n] of inFlight) {
      const i = this.index.get(nodeID);
      if (i !== undefined) out[i] = { view: out[i]!.view, inFlightCreates: n, prepared: out[i]!.prepared };
    }
    return out;
  }

  /** Counted from the decision on (call it before any await, so that concurrent decisions see it). */
  place(p: RecentPlacement): void {
    const list = this.pending.get(p.nodeID);
    if (list) list.push(p);
    else this.pending.set(p.nodeID, [p]);
    this.refresh(p.nodeID);
  }

  /** A sandbox this replica destroyed (`removed` set): subtracted until a view newer than `at` comes. */
  release(p: RecentPlacement): void {
    this.place(p);
  }

  /** A placement that did not happen (the create failed). */
  forget(p: RecentPlacement): void {
    const left = (this.pending.get(p.nodeID) ?? []).filter((x) => x !== p);
    if (left.length === 0) this.pending.delete(p.nodeID);
    else this.pending.set(p.nodeID, left);
    this.refresh(p.nodeID);
  }

  private refresh(nodeID: string): void {
    const i = this.index.get(nodeID);
    if (i === undefined) return;
    const view = withPlacements(this.views[i]!, this.pending.get(nodeID) ?? [], this.params());
    this.overlaid[i] = view;
    this.candidates[i] = candidate(view);
  }
}

/**
 * With the view's prepared node, made here once per view (a metrics read, a placement), not in
 * the decisions: the control's decision p50 at 1000 simulated nodes went from 0.303 to 0.059 ms
 * (bench/cluster-sim.ts), 0.064-0.070 to 0.017 ms in bench/scheduler.ts --book.
 */
const candidate = (view: NodeView): Candidate => ({ view, inFlightCreates: 0, prepared: prepareNode(view) });

/**
 * The view with the placements its heartbeat predates added in and the removals it predates taken
 * out (pure; the same object when there are none). Never below zero: a removal the view already
 * missed for another reason takes nothing it does not hold.
 */
export function withPlacements(v: NodeView, mine: readonly RecentPlacement[], params: DensityParams): NodeView {
  const extra = mine.filter((p) => !(v.lastSeen > p.at));
  if (extra.length === 0) return v;
  let mem = 0;
  let cpus = 0;
  let disk = 0;
  let added = 0;
  let removed = 0;
  for (const p of extra) {
    const sign = p.removed ? -1 : 1;
    mem += sign * footprintMiB(p, params);
    cpus += sign * p.cpus;
    disk += sign * (p.diskGiB ?? 0);
    if (p.removed) removed++;
    else added++;
  }
  const floor0 = (x: number) => Math.max(0, x);
  return {
    ...v,
    usage: {
      ...v.usage,
      quotaMemUsedMiB: floor0(v.usage.quotaMemUsedMiB + mem),
      quotaCpuUsed: floor0(v.usage.quotaCpuUsed + cpus),
      quotaDiskUsedGiB: floor0((v.usage.quotaDiskUsedGiB ?? 0) + disk),
    },
    sandboxes: { ...v.sandboxes, creating: v.sandboxes.creating + added, total: floor0(v.sandboxes.total + added - removed) },
  };
}

export function clusterNodeView(rec: NodeRecord, metrics: NodeView | undefined, lost: boolean, now: number, heartbeatTimeoutMs: number): NodeView {
  const flagged = withOperatorFlags(metrics ?? silentNode(rec), rec);
  const base: NodeView =
    rec.evictAt !== undefined && rec.draining
      ? { ...flagged, evictAt: rec.evictAt, reason: flagged.reason === 'draining' ? `draining: sandboxes evicted at ${isoTime(rec.evictAt)}` : flagged.reason }
      : flagged;
  const view: NodeView = rec.address !== undefined ? { ...base, address: rec.address } : base;
  const age = metrics ? now - metrics.lastSeen : Infinity;
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
    density: {
      footprintMiB: 0,
      paperCeiling: 0,
      safetyBoundary: 0,
      cpuCeiling: 0,
      effectiveCeiling: 0,
      bottleneck: 'memory',
      allPausedCeiling: 0,
      releaseRatio: 0,
      headroom: 0,
      releasedMiB: 0,
    },
    pool: { free: 0, inUse: 0, creating: 0, total: 0, target: 0, inFlight: 0, onDemand: 0, waitP50Ms: 0, waitP99Ms: 0, recentWaitsMs: [] },
    templates: [],
    lastSeen: rec.joinedAt,
  };
}
