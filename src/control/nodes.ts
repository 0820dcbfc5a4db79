// Nodes as the control plane sees them: the registry with each node's reported view (what
// operators see, with the scheduler's verdict, and what placements decide on), operator actions
// (cordon, drain with its evictions, delete), and the way to a node's API.
import type { NodeApi } from '../cubelet/types.js';
import { CubeError, toCubeError } from '../errors.js';
import { densityParamsFromConfig } from '../model/density.js';
import type { NodeView } from '../model/node.js';
import type { SandboxView } from '../model/sandbox.js';
import { isoTime } from '../model/time.js';
import type { NodeRecord } from '../store/types.js';
import { audited } from './admission.js';
import { clusterNodeView, PlacementBook } from './cluster/node-views.js';
import type { ControlContext } from './context.js';
import type { ControlDeath, NodeAction } from './control-plane.js';
import { withSchedulability } from './schedulable.js';
import type { WatchStream } from './watch.js';

/** How old the node metrics a placement decides on may be (on top of the heartbeat period). */
export const PLACEMENT_METRICS_MS = 250;
/** Drain evictions: one replica carries out the due ones; a replica that dies mid-way hands over within this. */
const EVICT_LEASE = 'drain-evict';
const EVICT_LEASE_MS = 10_000;

export class Nodes {
  /** The nodes placements decide on: the cached views with this replica's placements laid over. */
  readonly book: PlacementBook;
  private evicting?: Promise<void>;
  /**
   * The node views placements decide on, built once per metrics read (PLACEMENT_METRICS_MS) and
   * registry, not per create: building 1000 views per create was a quarter of the control's CPU
   * in the 1000-node bench (docs/benchmarks.md).
   */
  private viewCache?: { at: number; recs: NodeRecord[]; read: Promise<NodeView[]> };
  private viewReads = 0;
  private viewsInBook = 0;
  /**
   * Each node's view as the last read built it, with what it was built from: rebuilt only when
   * its registry record, its metrics (the store shares unchanged ones between reads) or its lost
   * marker changed, or its heartbeat went stale. Building all 1000 views every 250 ms while creates
   * come was 1.7% of the control's CPU in the 1000-node bench, allocating 1000 objects each time.
   */
  private built = new Map<string, { rec: NodeRecord; metrics?: NodeView; lost: boolean; timeout: number; view: NodeView; freshUntil: number }>();

  /** `destroy`: a sandbox destroyed by a drain's eviction (SandboxOps.destroySandbox). */
  constructor(
    private readonly ctx: ControlContext,
    private readonly watch: WatchStream,
    private readonly destroy: (sandboxID: string, actor: string, death: ControlDeath) => Promise<void>,
  ) {
    this.book = new PlacementBook(() => densityParamsFromConfig(ctx.cfg.config.master));
  }

  /** What operators see: each node with the scheduler's verdict for the default spec (placement reads placementViews). */
  async listNodes(): Promise<NodeView[]> {
    const views = await this.placementViews(false);
    const inFlight = await this.ctx.store.inFlight();
    const now = Date.now();
    return views.map((v) => withSchedulability(v, inFlight.get(v.nodeID) ?? 0, this.ctx.cfg.config.master, now));
  }

  /**
   * The registry (operator flags: cordon and drain act at once) is always current; with `cached`
   * the nodes' reported metrics may be up to PLACEMENT_METRICS_MS old. Placement uses that: nodes
   * report once a second anyway, and reading 1000 nodes' metrics per create would cost more
   * than the decision itself. The views of one read are shared (treat them as read-only).
   */
  async placementViews(cached: boolean): Promise<NodeView[]> {
    const { store } = this.ctx;
    const recs = await store.listNodes();
    const c = this.viewCache;
    if (cached && c !== undefined && Date.now() - c.at <= PLACEMENT_METRICS_MS && sameRecords(c.recs, recs)) return c.read;
    const ids = recs.map((r) => r.nodeID);
    const seq = ++this.viewReads;
    const read: Promise<NodeView[]> = Promise.all([this.ctx.feed.views(ids), store.lostNodes(ids)]).then(([metrics, lost]) => {
      const now = Date.now();
      const timeout = this.ctx.cfg.config.master.scheduler.heartbeat_timeout_ms;
      const built = new Map<string, { rec: NodeRecord; metrics?: NodeView; lost: boolean; timeout: number; view: NodeView; freshUntil: number }>();
      const views = recs.map((rec) => {
        const m = metrics.get(rec.nodeID);
        const isLost = lost.has(rec.nodeID);
        const b = this.built.get(rec.nodeID);
        if (b && b.rec === rec && b.metrics === m && b.lost === isLost && b.timeout === timeout && now <= b.freshUntil) {
          built.set(rec.nodeID, b);
          return b.view;
        }
        const view = clusterNodeView(rec, m, isLost, now, timeout);
        // A stale node's reason counts the seconds since its heartbeat: rebuilt every read.
        const seen = m ? m.lastSeen : Number.NaN;
        built.set(rec.nodeID, { rec, metrics: m, lost: isLost, timeout, view, freshUntil: !isLost && now - seen <= timeout ? seen + timeout : -Infinity });
        return view;
      });
      this.built = built;
      // Placements decide on the newest read (one that started earlier may finish later).
      if (seq > this.viewsInBook) {
        this.viewsInBook = seq;
        this.book.setViews(views, now);
      }
      return views;
    });
    this.viewCache = { at: Date.now(), recs, read };
    read.catch(() => (this.viewCache = undefined));
    return read;
  }

  /** The templates and the nodes holding them (NodeFeed.templates). */
  templates(): Promise<{ templateID: string; nodes: string[] }[]> {
    return this.ctx.feed.templates();
  }

  async nodeRecord(nodeID: string): Promise<NodeRecord> {
    const rec = await this.ctx.store.getNode(nodeID);
    if (!rec) throw new CubeError('NOT_FOUND', `node ${nodeID} not found`);
    return rec;
  }

  /** The node's API; with `fence` (the sandbox lock's token) its calls carry it (NodeDirectory.node). */
  async nodeApi(nodeID: string, fence?: string): Promise<NodeApi> {
    return this.ctx.nodes.node(nodeID, (await this.nodeRecord(nodeID)).address, fence);
  }

  /** When the node answered (SandboxRecord.nodeAt), as the node feed knows it. */
  nodeStamp(view: SandboxView): { nodeAt?: number } {
    const at = this.ctx.feed.answeredAt(view);
    return at === undefined ? {} : { nodeAt: at };
  }

  async nodeAction(a: NodeAction): Promise<NodeView> {
    const { nodeID } = a;
    const { store, nodes, feed } = this.ctx;
    return audited(store, a.actor, `node.${a.action}`, nodeID, async () => {
      const rec = await this.nodeRecord(nodeID);
      switch (a.action) {
        case 'cordon':
          await store.putNode({ ...rec, cordoned: true });
          await this.watch.appendEvent({ kind: 'node.cordoned', nodeID, message: `node ${nodeID} cordoned` });
          break;
        case 'uncordon':
          await store.putNode({ ...withoutEviction(rec), cordoned: false, draining: false });
          await this.watch.appendEvent({ kind: 'node.uncordoned', nodeID, message: `node ${nodeID} uncordoned` });
          break;
        case 'drain': {
          const evict = a.evict === true;
          const deadlineSec = a.deadlineSec ?? 0;
          // The deadline lives in the registry: whichever replica is alive then evicts (evictDue).
          const evictAt = evict ? Date.now() + deadlineSec * 1000 : undefined;
          await store.putNode({ ...withoutEviction(rec), draining: true, ...(evictAt !== undefined ? { evictAt } : {}) });
          await this.watch.appendEvent({
            kind: 'node.draining',
            nodeID,
            message: evict
              ? `node ${nodeID} draining: sandboxes destroyed after ${deadlineSec}s (at ${isoTime(evictAt!)})`
              : `node ${nodeID} draining: waiting for sandboxes to end`,
          });
          break;
        }
        case 'delete': {
          if (!rec.cordoned) throw new CubeError('CONFLICT', `node ${nodeID} must be cordoned before it is deleted`);
          const kept = feed.keeps(nodeID);
          if (kept !== undefined) throw new CubeError('CONFLICT', kept);
          const held = await store.listSandboxes({ nodeID });
          if (held.length > 0)
            throw new CubeError(
              'CONFLICT',
              `node ${nodeID} still holds ${held.length} sandbox(es) (${held.filter((s) => s.state === 'lost').length} lost); drain --evict it or destroy them first`,
            );
          await store.deleteNode(nodeID);
          nodes.forget(nodeID);
          await this.watch.appendEvent({ kind: 'node.deleted', nodeID, message: `node ${nodeID} deleted from the registry` });
          this.watch.broadcast({ type: 'node.removed', nodeID });
          const gone = clusterNodeView({ ...rec, cordoned: true }, undefined, false, Date.now(), 0);
          return gone;
        }
      }
      const view = (await this.listNodes()).find((n) => n.nodeID === nodeID)!;
      this.watch.broadcast({ type: 'node', node: view });
      return view;
    });
  }

  /** The tick's part: the due drain evictions, beside the tick (they take as long as their destroys), one run at a time. */
  tick(): void {
    this.evicting ??= this.evictDue()
      .catch((err: unknown) => this.ctx.log.warn({ err: toCubeError(err).message }, 'drain eviction failed'))
      .finally(() => (this.evicting = undefined));
  }

  /**
   * Carries out the drain evictions whose deadline passed (one replica at a time, under a lease).
   * The deadline is cleared once the node holds no record: a failed destroy is tried again.
   */
  private async evictDue(): Promise<void> {
    const { store, replicaID } = this.ctx;
    const due = (await store.listNodes()).filter((n) => n.evictAt !== undefined && n.evictAt <= Date.now());
    if (due.length === 0 || !(await store.holdLease(EVICT_LEASE, replicaID, EVICT_LEASE_MS))) return;
    for (const n of due) {
      await this.evict(n.nodeID);
      if ((await store.listSandboxes({ nodeID: n.nodeID })).length > 0) continue;
      const cur = await store.getNode(n.nodeID);
      if (cur?.evictAt !== undefined) await store.putNode(withoutEviction(cur));
      await this.watch.appendEvent({
        kind: 'node.draining',
        nodeID: n.nodeID,
        message: `node ${n.nodeID}: drain deadline ${isoTime(n.evictAt!)} reached, its sandboxes were destroyed (by ${replicaID})`,
      });
    }
  }

  private async evict(nodeID: string): Promise<void> {
    const list = await this.ctx.store.listSandboxes({ nodeID }).catch((err: unknown) => {
      this.ctx.log.error({ err, nodeID }, "drain eviction could not list the node's sandboxes");
      return [];
    });
    for (const s of list) {
      // A lost node's sandboxes are deleted too: destroyed there if it comes back (destroySandbox).
      const death: ControlDeath =
        s.state === 'lost'
          ? { reason: 'node_lost', message: `node ${nodeID} was lost and then drained with --evict` }
          : { reason: 'drain_evicted', message: `node ${nodeID} drained with --evict: its deadline passed` };
      await this.destroy(s.sandboxID, 'system:drain', death).catch((err: unknown) =>
        this.ctx.log.error({ err, sandboxID: s.sandboxID }, 'drain eviction failed'),
      );
    }
  }
}

/** Whether two registry reads hold the same records (the registry copy keeps them while its version stands). */
function sameRecords(a: readonly NodeRecord[], b: readonly NodeRecord[]): boolean {
  return a.length === b.length && a.every((r, i) => r === b[i]);
}

function withoutEviction(rec: NodeRecord): NodeRecord {
  const { evictAt: _e, ...rest } = rec;
  return rest;
}
