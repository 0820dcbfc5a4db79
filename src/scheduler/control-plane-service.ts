// The ControlPlane, the one implementation for every role, over a StateStore and a
// NodeDirectory. `--role control`: stateless, any replica serves any request; records in MySQL
// and live state in Redis (ClusterStore), nodes reached through node RPC (RemoteNodes). Role
// all: a cluster of one wired in-process (daemon.ts): the embedded store, the daemon's cubelet
// (LocalNodes), `solo`. Nodes heartbeat every second with their view and sandbox list: that is
// how the records learn sandbox states (the node is their one writer) and how a lost node is
// noticed.
import type { Logger } from 'pino';
import type { Config } from '../config/schema.js';
import type { ConfigChangeMeta, ConfigCommit, ConfigStore, ConfigVersion } from '../config/store.js';
import { answeredAt } from '../cubelet/remote.js';
import { heartbeatSeen, type Heartbeat, type HeartbeatAnswer, type NodeNotice } from '../cubelet/rpc-wire.js';
import type { NodeApi, NodeEvent } from '../cubelet/types.js';
import type { ConfigChange, ConfigView, ReloadResult } from '../model/config.js';
import type { EventKind, EventView } from '../model/event.js';
import type { NodeView } from '../model/node.js';
import { publicView, type ListFilter, type PauseOptions, type SandboxRecord, type SandboxView } from '../model/sandbox.js';
import { isoTime } from '../model/time.js';
import type { Snapshot, WatchMessage } from '../model/watch.js';
import type { NodeDirectory } from './node-directory.js';
import { CubeError, toCubeError } from '../errors.js';
import { newSandboxID, newToken } from '../ids.js';
import type { StateStore } from '../store/types.js';
import { isConnectionError } from '../store/cluster/retry.js';
import type { NodeRecord } from '../store/types.js';
import { audit, audited, checkTimeout, refusalError, refusalOf, refusalRule, requireFits, requireTemplate, resolveCreate, resumeRefusal } from './admission.js';
import type { ControlPlane, CreateSandboxRequest, NodeAction } from './control-plane.js';
import { createFromSnapshot, SnapshotBook } from './snapshots.js';
import { CreateStats } from './create-stats.js';
import { densityParamsFromConfig } from '../model/density.js';
import { schedule } from './pipeline.js';
import { snapshotOf, Watchers } from './watchers.js';
import { sweepLostNodes } from './cluster/lost-sweep.js';
import { withSchedulability } from './schedulable.js';
import { clusterNodeView, PlacementBook, type RecentPlacement } from './cluster/node-views.js';
import { syncNodeSandboxes } from './cluster/sandbox-sync.js';
import type { EgressRequest } from '../network/egress.js';

export interface ControlPlaneServiceOptions {
  store: StateStore;
  config: ConfigStore;
  log: Logger;
  /** Where the nodes are: remote (node RPC) or in this process (role all). */
  nodes: NodeDirectory;
  /**
   * This replica is the cluster's only one and its nodes are in this process (role all, a
   * cluster of one). Its config files are the cluster's: `config set` writes them and each start
   * records them as a new version (otherwise the store's config is in force on every replica and
   * files only seed an empty store). Its watchers hear of changes as they happen: events as they
   * are appended, sandboxes as the nodes report them (otherwise from the store, every tick, since
   * other replicas make changes too). Placement reads the nodes' views from them, not from
   * their last heartbeat.
   */
  solo?: boolean;
  /** This replica's name (leases, logs). */
  replicaID: string;
  /** Watch deltas and the lost-node sweep run this often. */
  tickMs?: number;
}

/** Node metrics outlive the heartbeat timeout so a lost node still shows its last numbers. */
const METRICS_TTL_MS = 10 * 60_000;
/** A create whose record says `creating` this long without the node listing it is over. */
const CREATING_GRACE_MS = 120_000;
/**
 * Per-sandbox operation lock: a lease its holder renews every OP_LEASE_MS / 3 while the
 * operation runs, so one held by a replica that was killed ends within OP_LEASE_MS (it was a
 * 60 s lock: the survivor answered busy for a minute). A holder that could not renew in time
 * (its Redis calls stalled) may overlap with the next: record writes are compare-and-set on
 * the record's generation, so the later of the two cannot overwrite with stale data, and its
 * calls to the node carry the lock's fencing token, which the node refuses once a later
 * holder's reached it (130491).
 */
const OP_LEASE_MS = 3000;
/** How old the node metrics a placement decides on may be (on top of the heartbeat period). */
export const PLACEMENT_METRICS_MS = 250;
/** One replica at a time copies the event stream into MySQL (ClusterStore.archiveEvents). */
const ARCHIVE_LEASE = 'event-archive';
/** Nodes a create tries before it gives up on unreachable ones (130596). */
const CREATE_ATTEMPTS = 3;
/** Drain evictions: one replica carries out the due ones; a replica that dies mid-way hands over within this. */
const EVICT_LEASE = 'drain-evict';
const EVICT_LEASE_MS = 10_000;
/** How long an operation waits for the lock before answering busy. */
const LOCK_WAIT_MS = 2000;

export class ControlPlaneService implements ControlPlane {
  private readonly store: StateStore;
  private readonly cfg: ConfigStore;
  private readonly log: Logger;
  private readonly watchers = new Watchers();
  private readonly stats = new CreateStats();
  readonly snapshots: SnapshotBook;
  private readonly unsubs: (() => void)[] = [];
  private timer?: NodeJS.Timeout;
  private ticking = false;
  private readonly missingSince = new Map<string, number>();
  // What this replica last sent its watchers, to send only what changed.
  private seen = { eventID: -1, nodes: new Map<string, string>(), sandboxes: new Map<string, string>(), stats: '' };
  /** The nodes placements decide on: the cached views with this replica's placements laid over. */
  private readonly book = new PlacementBook(() => densityParamsFromConfig(this.cfg.config.master));
  private readonly syncing = new Set<string>();
  /** The latest list that came while the node's previous one was being reconciled (queueSync). */
  private readonly syncNext = new Map<string, Heartbeat>();
  /**
   * Each node's template list as this replica last wrote it to the registry: written again only
   * when the node reports a different one (or the write failed). Reading the previous reports
   * back from Redis instead cost a parse of every node's metrics per heartbeat batch.
   */
  private readonly templatesWritten = new Map<string, string>();
  /**
   * When this replica last could not watch the nodes (Redis or MySQL failed, or its own ticks
   * stalled: an overloaded process cannot tell a silent node from its own lag): lost detection
   * counts silence from then on (lost-sweep.ts).
   */
  private blindAt = 0;
  private lastTickAt = 0;
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

  constructor(private readonly o: ControlPlaneServiceOptions) {
    this.store = o.store;
    this.cfg = o.config;
    this.log = o.log;
    this.snapshots = new SnapshotBook({ store: o.store, node: (nodeID) => this.nodeApi(nodeID), sandbox: (id) => this.getSandbox(id), create: (req) => this.createSandbox(req), log: o.log });
  }

  async start(): Promise<void> {
    if (this.o.solo) await this.recordFiles();
    else await this.followConfig();
    // Every change of the config here (a file edit, a set, the cluster's version put in force)
    // runs in the config's one queue, and is numbered by the store's compare-and-set before it
    // is in force: a change made here either becomes the cluster's next version or is reported
    // lost, and two configs never share a version (both happened when the files' changes were
    // put in force first and offered after, beside the queue).
    this.cfg.useAuthority({ commit: (next, over, meta, changes) => this.commitConfig(next, over, meta, changes) });
    this.unsubs.push(
      () => this.cfg.useAuthority(undefined),
      this.cfg.on('change', ({ changes }) => this.broadcast({ type: 'config', config: this.cfg.view(), changes })),
      // A rejection, or files fixed back to what is in force, change no version but the view's `rejected`.
      this.cfg.on('reload', (r) => {
        if (!r.ok || r.changes.length === 0) this.broadcast({ type: 'config', config: this.cfg.view(), changes: [] });
      }),
      this.cfg.on('rejected', ({ errors, kept }) => {
        void this.appendEvent({ kind: 'config.rejected', code: 130483, message: `config rejected on ${this.o.replicaID}, version ${kept.version} stays: ${errors.map((e) => `${e.path}: ${e.message}`).join('; ')}` }).catch(() => undefined);
      }),
    );
    if (this.o.solo) for (const node of this.o.nodes.inProcess) this.unsubs.push(node.subscribe((e) => this.onNodeEvent(e)));
    this.timer = setInterval(() => void this.tick(), this.o.tickMs ?? 1000);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    clearInterval(this.timer);
    for (const u of this.unsubs.splice(0)) u();
  }

  // --- heartbeats (served on the control's listener, see cluster-rpc.ts)

  /** Registers a node on its first heartbeat, records its metrics, and reconciles its sandboxes. */
  heartbeat(hb: Heartbeat): Promise<HeartbeatAnswer> {
    return this.heartbeats([hb]);
  }

  /**
   * Heartbeats of several nodes at once (a process standing for many simulated nodes sends one
   * batch per interval): the registry, metrics, lost markers and records are each read once per
   * batch, not once per node. With `settle` (a node that has just started, before this
   * replica serves: nothing is mid-create on it) the records are reconciled before the answer,
   * `creating` ones included.
   */
  async heartbeats(hbs: Heartbeat[], settle = false): Promise<HeartbeatAnswer> {
    const ids = hbs.map((hb) => hb.nodeID);
    // Liveness first, and in Redis alone: a MySQL outage must not make a healthy node look
    // silent. What follows (registry, templates, events, records) may fail with MySQL; the node
    // then sends its notices again with the next heartbeat. Views are written only when they
    // changed; the others are touched (their lastSeen moves), and a node whose view the store
    // does not hold is asked for it.
    const lost = await this.store.lostNodes(ids);
    await this.store.putNodeMetrics(hbs.flatMap((hb) => (hb.view ? [hb.view] : [])), METRICS_TTL_MS);
    const resend = new Set(await this.store.touchNodeMetrics(hbs.flatMap((hb) => (hb.view || !hb.seen ? [] : [{ nodeID: hb.nodeID, lastSeen: hb.seen.lastSeen }])), METRICS_TTL_MS));
    const listed = hbs.filter((hb) => hb.sandboxes !== undefined);
    const [recs, records] = await Promise.all([this.store.listNodes(), listed.length === 0 ? [] : this.store.listSandboxes(listed.length === 1 ? { nodeID: listed[0]!.nodeID } : undefined)]);
    const byID = new Map(recs.map((r) => [r.nodeID, r]));
    await Promise.all(
      hbs.map(async (hb) => {
        const { nodeID, view } = hb;
        let rec = byID.get(nodeID);
        if (!rec || rec.address !== hb.address) {
          const fresh = !rec;
          // Registered with its view (a node deleted from the registry and back: its view went too).
          if (fresh && !view) return void resend.add(nodeID);
          // A node deleted from the registry (its templates with it) and back: written anew.
          if (fresh) this.templatesWritten.delete(nodeID);
          rec = { cordoned: false, draining: false, joinedAt: Date.now(), ...rec, nodeID, address: hb.address };
          await this.store.putNode(rec);
          if (fresh && view) await this.appendEvent({ kind: 'node.joined', nodeID, message: `node ${nodeID} registered at ${hb.address} (${view.capacity.cpus} cpus, ${view.capacity.memoryMiB} MiB, templates ${view.templates.join(', ') || 'none'})` });
        }
        // The template registry changes only when the node's list does (it is in the view).
        if (view) await this.noteNodeTemplates(nodeID, view.templates);
        if (lost.has(nodeID)) {
          // Its sandboxes were marked lost: its list sets them right (asked for when it did not come).
          if (!hb.sandboxes) resend.add(nodeID);
          await this.store.clearNodeLost(nodeID);
          await this.appendEvent({ kind: 'node.joined', nodeID, message: `node ${nodeID} is back after being lost; its sandboxes are reconciled with what it still holds` });
        }
      }),
    );
    // In order, and in one batch (the store groups appends that come together); each once per
    // sender and seq, however often the heartbeat was sent.
    await Promise.all(hbs.flatMap((hb) => hb.events.map((e) => this.appendNodeEvent(e, hb.sender))));
    // The records are reconciled behind the answer: a node's liveness must not wait on record
    // writes queued behind a burst of creates. One reconcile per node at a time; a list arriving
    // meanwhile is reconciled after it (the latest only).
    const held = new Map<string, SandboxRecord[]>();
    for (const r of records) held.set(r.nodeID, [...(held.get(r.nodeID) ?? []), r]);
    for (const hb of listed) {
      if (settle) await this.syncSandboxes(hb.nodeID, held.get(hb.nodeID) ?? [], hb.sandboxes!, hb.at, 0);
      else this.queueSync(hb, held.get(hb.nodeID) ?? []);
    }
    // Nodes run the cluster's config: this replica's is the store's (followConfig, every tick).
    const { version, config } = this.cfg.versionInfo;
    const answer: HeartbeatAnswer = hbs.some((hb) => heartbeatSeen(hb)?.configVersion !== version) ? { ok: true, config: { version, master: config.master } } : { ok: true };
    return resend.size > 0 ? { ...answer, resend: [...resend] } : answer;
  }

  /**
   * Reconciles a node's list behind the heartbeat's answer, one at a time per node. A list that
   * comes while one is reconciled waits for it (only the latest), then is reconciled over records
   * read afresh: with lists sent only when they change, a skipped one would wait for the next
   * refresh (SANDBOX_LIST_REFRESH_MS).
   */
  private queueSync(hb: Heartbeat, records: SandboxRecord[]): void {
    if (this.syncing.has(hb.nodeID)) return void this.syncNext.set(hb.nodeID, hb);
    this.syncing.add(hb.nodeID);
    void (async () => {
      await this.syncSandboxes(hb.nodeID, records, hb.sandboxes!, hb.at, CREATING_GRACE_MS);
      for (let next = this.syncNext.get(hb.nodeID); next; next = this.syncNext.get(hb.nodeID)) {
        this.syncNext.delete(hb.nodeID);
        await this.syncSandboxes(hb.nodeID, await this.store.listSandboxes({ nodeID: hb.nodeID }), next.sandboxes!, next.at, CREATING_GRACE_MS);
      }
    })()
      .catch((err: unknown) => this.log.warn({ err, nodeID: hb.nodeID }, 'sandbox reconcile failed'))
      .finally(() => this.syncing.delete(hb.nodeID));
  }

  private async syncSandboxes(nodeID: string, records: SandboxRecord[], onNode: SandboxView[], listedAt: number | undefined, creatingGraceMs: number): Promise<void> {
    for (const a of syncNodeSandboxes(records, onNode, Date.now(), creatingGraceMs, listedAt)) {
      const sandboxID = a.type === 'unknown' ? a.view.sandboxID : a.rec.sandboxID;
      // An operation in progress writes its own outcome; this heartbeat may predate it. Writes
      // are compare-and-set on the generation read with `records`: a record written since (an
      // operation that finished, a delete) is newer than this report and stays.
      await this.withLock(sandboxID, async (fence) => {
        if (a.type === 'update') await this.store.putSandboxIf(a.rec, a.rec.generation ?? 0);
        else if (a.type === 'gone') await this.store.deleteSandboxIf(sandboxID, a.rec.generation ?? 0);
        else if (await this.store.wasDeleted(sandboxID)) await this.nodeApi(nodeID, fence).then((n) => n.destroySandbox(sandboxID));
        // Created on the node but its record was never written (a replica died in between): adopt
        // it, unless a record appeared meanwhile (a create that was still writing it).
        else if ((await this.store.putSandboxIf({ ...a.view, accessToken: newToken(), envVars: {} }, 0)) > 0) {
          await this.appendEvent({ kind: 'sandbox.created', nodeID, sandboxID, message: `adopted from node ${nodeID} (its record was missing; new access token)` });
        }
      }).catch((err: unknown) => this.log.warn({ err, sandboxID, action: a.type }, 'sandbox reconcile step failed'));
    }
  }

  // --- sandboxes

  /**
   * Places and creates a sandbox. A node that cannot be reached (it died and is not marked lost
   * yet) costs one attempt: the create is placed again without it, up to CREATE_ATTEMPTS nodes,
   * unless the request pinned its node.
   */
  async createSandbox(asked: CreateSandboxRequest): Promise<SandboxRecord> {
    const snap = await this.snapshots.forCreate(asked.templateID);
    const req = snap ? createFromSnapshot(snap, asked) : asked;
    const unreachable = new Set<string>();
    for (;;) {
      try {
        return await this.createOnce(req, unreachable);
      } catch (e) {
        if (!(e instanceof UnreachableNode)) throw e;
        unreachable.add(e.nodeID);
        if (req.nodeID !== undefined || unreachable.size >= CREATE_ATTEMPTS) throw e.cause;
        this.log.warn({ nodeID: e.nodeID, err: e.cause.message }, 'create: node unreachable, placing on another');
      }
    }
  }

  private async createOnce(req: CreateSandboxRequest, unreachable: ReadonlySet<string>): Promise<SandboxRecord> {
    const master = this.cfg.config.master;
    const r = resolveCreate(req, master);
    // One round trip for both (the Redis client pipelines what is sent together).
    const [, inFlight] = await Promise.all([this.placementViews(true), this.store.inFlight()]);
    const all = this.book.nodeViews();
    const nodes = unreachable.size === 0 ? all : all.filter((n) => !unreachable.has(n.nodeID));
    await this.requireTemplate(r.templateID, nodes);
    requireFits(r, nodes, master);
    const candidates = unreachable.size === 0 ? this.book.withInFlight(inFlight) : this.book.withInFlight(inFlight).filter((c) => !unreachable.has(c.view.nodeID));
    const d0 = performance.now();
    // fetchable: requireTemplate found the template on some node; nodes lacking it fetch it (cubelet/layer-fetch.ts).
    const placed = schedule({ templateID: r.templateID, cpus: r.cpus, memoryMiB: r.memoryMiB, fetchable: true, ...(req.nodeID !== undefined ? { nodeID: req.nodeID } : {}), ...(req.runtime !== undefined ? { runtime: req.runtime } : {}) }, candidates, master, Date.now());
    this.stats.recordDecision(performance.now() - d0);
    const refusal = refusalOf(placed, nodes);
    if (refusal !== undefined || !placed.ok) {
      const message = refusal ?? 'no node available';
      const err = refusalError(placed, message);
      this.stats.recordRefusal(err.code, refusalRule(placed));
      await this.appendEvent({ kind: 'schedule.failed', code: 130597, message });
      await audit(this.store, req.actor, 'sandbox.create', r.templateID, message);
      throw err;
    }
    const nodeID = placed.nodeID;
    // Counted from the decision on (synchronously, before any await) so that concurrent decisions see it.
    const placement: RecentPlacement = { nodeID, cpus: r.cpus, memoryMiB: r.memoryMiB, at: Infinity };
    this.book.place(placement);
    const forget = () => this.book.forget(placement);
    const chosen = nodes.find((n) => n.nodeID === nodeID);
    let node: NodeApi;
    try {
      node = this.o.nodes.node(nodeID, chosen?.address);
    } catch (e) {
      forget();
      throw e;
    }
    const sandboxID = newSandboxID();
    const now = Date.now();
    const endAt = now + r.timeoutSec * 1000;
    const secrets = { accessToken: newToken(), envVars: { ...(req.envVars ?? {}) } };
    const metadata = { ...(req.metadata ?? {}) };
    // Recorded before the node creates it: a replica dying now leaves a record the node's
    // heartbeats settle (running, or gone), never a sandbox nobody knows of.
    const pending: SandboxRecord = { sandboxID, templateID: r.templateID, nodeID, state: 'creating', spec: { cpus: r.cpus, memoryMiB: r.memoryMiB, diskGiB: r.diskGiB }, metadata, startedAt: now, endAt, runtime: chosen?.runtime ?? 'unknown', ...secrets };
    // The record and the in-flight count together: each round trip a create waits for is a
    // wake-up of the control and of the store, which on a loaded machine cost more than the work.
    const [put, inc] = await Promise.allSettled([this.store.putSandbox(pending), this.store.incInFlight(nodeID)]);
    if (put.status === 'rejected' || inc.status === 'rejected') {
      forget();
      if (inc.status === 'fulfilled') await this.store.decInFlight(nodeID).catch(() => undefined);
      throw put.status === 'rejected' ? put.reason : (inc as PromiseRejectedResult).reason;
    }
    const pendingGen = put.value;
    const t0 = performance.now();
    let counted = true;
    const uncount = () => {
      counted = false;
      return this.store.decInFlight(nodeID).catch(() => undefined);
    };
    // An in-process node registers the sandbox before its first await, and its views are taken
    // on demand: from this call on, any view newer than now counts it. Left at Infinity (a remote
    // node's heartbeat cannot tell), the placement was counted on top of the creating sandbox for
    // the whole create: 20 concurrent creates on a 25.6-cpu node refused the 20th (26+1 > 25.6).
    if (this.o.solo) placement.at = Date.now();
    try {
      const view = await node.createSandbox({ sandboxID, templateID: r.templateID, cpus: r.cpus, memoryMiB: r.memoryMiB, diskGiB: r.diskGiB, endAt, env: secrets.envVars, metadata, ...(req.egress ? { egress: req.egress } : {}), ...(req.lifecycle ? { lifecycle: req.lifecycle } : {}), ...(req.actor !== undefined ? { owner: req.actor } : {}), ...(req.runtime !== undefined ? { runtime: req.runtime } : {}), ...(req.fromSnapshot !== undefined ? { fromSnapshot: req.fromSnapshot } : {}) });
      // Over the pending record (or a heartbeat's update of it); a destroy that came meanwhile
      // wins, and the node's copy goes.
      const rec = await this.writeOver({ ...view, ...secrets, ...this.nodeStamp(view) }, pendingGen);
      if (!rec) throw new CubeError('NOT_FOUND', `sandbox ${sandboxID} was destroyed while it was being created`);
      // The node's clock, like the lastSeen it is compared with: the control's own clock after the
      // answer would count the sandbox twice (heartbeat and placement) for a heartbeat interval.
      placement.at = view.startedAt || Date.now();
      this.stats.record(performance.now() - t0);
      await Promise.all([audit(this.store, req.actor, 'sandbox.create', sandboxID, 'ok', { templateID: r.templateID, cpus: r.cpus, memoryMiB: r.memoryMiB, nodeID }), uncount()]);
      return rec;
    } catch (e) {
      forget();
      // The node may have finished after we gave up on it: the deleted record makes the next
      // heartbeat destroy it there.
      await this.store.deleteSandbox(sandboxID).catch((err: unknown) => this.log.error({ err, sandboxID }, 'could not mark a failed create deleted'));
      await node.destroySandbox(sandboxID).catch(() => undefined);
      await audit(this.store, req.actor, 'sandbox.create', sandboxID, toCubeError(e).message, { nodeID }).catch(() => undefined);
      // Unreachable: it never answered, so the create may be tried on another node.
      if (e instanceof CubeError && e.kind === 'NODE_UNREACHABLE') throw new UnreachableNode(nodeID, e);
      throw e;
    } finally {
      if (counted) await uncount();
    }
  }

  /**
   * 404 only when no node holds the template. Nodes whose reports are missing (Redis came back
   * empty and they have not heartbeat since) may hold it: the template registry in MySQL says,
   * and the answer is then a retryable 503, never a 404 for a template that exists.
   */
  private async requireTemplate(templateID: string, nodes: NodeView[]): Promise<void> {
    try {
      requireTemplate(templateID, nodes);
    } catch (e) {
      const holders = (await this.store.listTemplates()).find((t) => t.templateID === templateID)?.nodes ?? [];
      const waiting = holders.filter((id) => nodes.some((n) => n.nodeID === id && !n.lost));
      if (waiting.length === 0) throw e;
      throw new CubeError('STATE_UNAVAILABLE', `template ${templateID} is on ${waiting.join(', ')}, whose reports are not in yet (the live store restarted); retry`, { retryAfter: 1 });
    }
  }

  async getSandbox(sandboxID: string): Promise<SandboxRecord> {
    const rec = await this.store.getSandbox(sandboxID);
    if (!rec || rec.state === 'gone') throw new CubeError('NOT_FOUND', `sandbox ${sandboxID} not found`);
    return rec;
  }

  listSandboxes(filter?: ListFilter): Promise<SandboxRecord[]> {
    return this.store.listSandboxes(filter);
  }

  async destroySandbox(sandboxID: string, actor?: string): Promise<void> {
    const rec = await this.getSandbox(sandboxID);
    await audited(this.store, actor, 'sandbox.destroy', sandboxID, () =>
      this.locked(sandboxID, async (fence) => {
        // A node that cannot be reached (down, or lost) destroys it when it is back: the history
        // holds the record as deleted, and the node's first heartbeat that lists the sandbox
        // has it destroyed (syncSandboxes). The client's delete is done now either way.
        const unreachable = await this.nodeApi(rec.nodeID, fence)
          .then((n) => n.destroySandbox(sandboxID))
          .then(
            () => false,
            (e: unknown) => (e instanceof CubeError && e.kind === 'NODE_UNREACHABLE' ? true : Promise.reject(e)),
          );
        await this.store.deleteSandbox(sandboxID);
        if (unreachable) await this.appendEvent({ kind: 'sandbox.destroyed', nodeID: rec.nodeID, sandboxID, message: `sandbox ${sandboxID} deleted while node ${rec.nodeID} is unreachable: destroyed there when it is back` });
      }),
    );
  }

  async pauseSandbox(sandboxID: string, actor?: string, opts?: PauseOptions): Promise<SandboxRecord> {
    const rec = await this.getSandbox(sandboxID);
    return audited(this.store, actor, 'sandbox.pause', sandboxID, () => this.locked(sandboxID, async (fence) => this.record(rec, await (await this.nodeApi(rec.nodeID, fence)).pauseSandbox(sandboxID, opts))));
  }

  async resumeSandbox(sandboxID: string, timeoutSec?: number, actor?: string): Promise<{ sandbox: SandboxRecord; resumed: boolean }> {
    if (timeoutSec !== undefined) checkTimeout(timeoutSec, this.cfg.config.master);
    const rec = await this.getSandbox(sandboxID);
    const address = (await this.nodeRecord(rec.nodeID)).address;
    return this.locked(sandboxID, async (fence) => {
      const node = this.o.nodes.node(rec.nodeID, address, fence);
      let view: SandboxView | undefined;
      let resumed = false;
      // The record may lag the node by a heartbeat: a pause at the sandbox's timeout that the
      // node began just now shows `running` or `pausing` here. The node's state decides, and its
      // resume waits for a pause in progress (setting the timeout of a pausing sandbox answered 503).
      const state = rec.state === 'paused' ? rec.state : (await node.getSandbox(sandboxID))?.state;
      if (state === 'paused' || state === 'pausing') {
        const refusal = resumeRefusal(rec.spec, await node.nodeView(), this.cfg.config.master);
        if (refusal !== undefined) {
          this.stats.recordRefusal(130409, 'release_ratio');
          await audit(this.store, actor, 'sandbox.resume', sandboxID, refusal);
          throw new CubeError('CONFLICT', refusal);
        }
        view = await audited(this.store, actor, 'sandbox.resume', sandboxID, () => node.resumeSandbox(sandboxID));
        resumed = true;
      }
      if (timeoutSec !== undefined) view = await node.setEndAt(sandboxID, Date.now() + timeoutSec * 1000);
      view ??= await node.getSandbox(sandboxID);
      if (!view) throw new CubeError('NOT_FOUND', `sandbox ${sandboxID} not found on node ${rec.nodeID}`);
      return { sandbox: await this.record(rec, view), resumed };
    });
  }

  async setTimeout(sandboxID: string, timeoutSec: number): Promise<SandboxRecord> {
    checkTimeout(timeoutSec, this.cfg.config.master, 1);
    const rec = await this.getSandbox(sandboxID);
    return this.locked(sandboxID, async (fence) => this.record(rec, await (await this.nodeApi(rec.nodeID, fence)).setEndAt(sandboxID, Date.now() + timeoutSec * 1000)));
  }

  async setEgress(sandboxID: string, req: EgressRequest): Promise<SandboxRecord> {
    const rec = await this.getSandbox(sandboxID);
    return this.locked(sandboxID, async (fence) => this.record(rec, await (await this.nodeApi(rec.nodeID, fence)).setEgress(sandboxID, req)));
  }

  async nodeFor(sandboxID: string): Promise<NodeApi> {
    return this.nodeApi((await this.getSandbox(sandboxID)).nodeID);
  }

  /**
   * Writes the node's answer over the record (keeping its secrets) and returns it. The answer is
   * the newest the node said; a heartbeat reconcile that wrote since `rec` was read is retried
   * over, a delete is not undone.
   */
  private async record(rec: SandboxRecord, view: SandboxView): Promise<SandboxRecord> {
    const out: SandboxRecord = { ...view, accessToken: rec.accessToken, envVars: rec.envVars, ...this.nodeStamp(view) };
    return (await this.writeOver(out, rec.generation ?? 0)) ?? out;
  }

  /**
   * Writes `out` over the live record, starting from the generation the caller read; when a
   * heartbeat reconcile wrote in between, over that one (a node answer is newer than any list
   * taken before it). Undefined when the record was deleted meanwhile: a delete is not undone.
   * The generation to retry over is read where the compare-and-set happens, in MySQL: a route
   * in Redis can lag it (rebuilt from a snapshot after a reconnect), and retrying over the route's
   * generation failed every try (a create answered 130490 in the 200-create fault test).
   */
  private async writeOver(out: SandboxRecord, generation: number): Promise<SandboxRecord | undefined> {
    for (let g = generation, tries = 0; tries < 5; tries++) {
      const written = await this.store.putSandboxIf(out, g);
      if (written > 0) return { ...out, generation: written };
      const cur = await this.store.getSandboxForWrite(out.sandboxID);
      if (!cur || cur.state === 'gone') return undefined;
      g = cur.generation ?? 0;
    }
    throw new CubeError('SANDBOX_BUSY', `sandbox ${out.sandboxID}: its record kept changing while this operation wrote it`, { retryAfter: 1 });
  }

  // --- nodes

  /** What operators see: each node with the scheduler's verdict for the default spec (placement reads placementViews). */
  async listNodes(): Promise<NodeView[]> {
    const views = await this.placementViews(false);
    const inFlight = await this.store.inFlight();
    const now = Date.now();
    return views.map((v) => withSchedulability(v, inFlight.get(v.nodeID) ?? 0, this.cfg.config.master, now));
  }

  /**
   * The registry (operator flags: cordon and drain act at once) is always current; with `cached`
   * the nodes' reported metrics may be up to PLACEMENT_METRICS_MS old. Placement uses that: nodes
   * report once a second anyway, and reading 1000 nodes' metrics per create would cost more
   * than the decision itself. The views of one read are shared (treat them as read-only).
   */
  private async placementViews(cached: boolean): Promise<NodeView[]> {
    const recs = await this.store.listNodes();
    const c = this.viewCache;
    if (cached && c !== undefined && Date.now() - c.at <= PLACEMENT_METRICS_MS && sameRecords(c.recs, recs)) return c.read;
    const ids = recs.map((r) => r.nodeID);
    const seq = ++this.viewReads;
    const read: Promise<NodeView[]> = Promise.all([this.o.solo ? this.inProcessViews() : this.store.getNodeMetrics(ids), this.store.lostNodes(ids)]).then(([metrics, lost]) => {
      const now = Date.now();
      const timeout = this.cfg.config.master.scheduler.heartbeat_timeout_ms;
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

  /** solo: the in-process nodes' views as they are now (what their next heartbeat would say). */
  private async inProcessViews(): Promise<Map<string, NodeView>> {
    return new Map(await Promise.all(this.o.nodes.inProcess.map(async (n) => [n.nodeID, await n.nodeView()] as const)));
  }

  private async nodeRecord(nodeID: string): Promise<NodeRecord> {
    const rec = await this.store.getNode(nodeID);
    if (!rec) throw new CubeError('NOT_FOUND', `node ${nodeID} not found`);
    return rec;
  }

  /** The node's API; with `fence` (the sandbox lock's token) its calls carry it (NodeDirectory.node). */
  private async nodeApi(nodeID: string, fence?: string): Promise<NodeApi> {
    return this.o.nodes.node(nodeID, (await this.nodeRecord(nodeID)).address, fence);
  }

  /** When the node answered (SandboxRecord.nodeAt): remote nodes stamp their answers; in-process ones share this clock, read now the answer is in. */
  private nodeStamp(view: SandboxView): { nodeAt?: number } {
    const at = answeredAt(view) ?? (this.o.nodes.inProcess.length > 0 ? Date.now() : undefined);
    return at === undefined ? {} : { nodeAt: at };
  }

  async nodeAction(a: NodeAction): Promise<NodeView> {
    const { nodeID } = a;
    return audited(this.store, a.actor, `node.${a.action}`, nodeID, async () => {
      const rec = await this.nodeRecord(nodeID);
      switch (a.action) {
        case 'cordon':
          await this.store.putNode({ ...rec, cordoned: true });
          await this.appendEvent({ kind: 'node.cordoned', nodeID, message: `node ${nodeID} cordoned` });
          break;
        case 'uncordon':
          await this.store.putNode({ ...withoutEviction(rec), cordoned: false, draining: false });
          await this.appendEvent({ kind: 'node.uncordoned', nodeID, message: `node ${nodeID} uncordoned` });
          break;
        case 'drain': {
          const evict = a.evict === true;
          const deadlineSec = a.deadlineSec ?? 0;
          // The deadline lives in the registry: whichever replica is alive then evicts (evictDue).
          const evictAt = evict ? Date.now() + deadlineSec * 1000 : undefined;
          await this.store.putNode({ ...withoutEviction(rec), draining: true, ...(evictAt !== undefined ? { evictAt } : {}) });
          await this.appendEvent({ kind: 'node.draining', nodeID, message: evict ? `node ${nodeID} draining: sandboxes destroyed after ${deadlineSec}s (at ${isoTime(evictAt!)})` : `node ${nodeID} draining: waiting for sandboxes to end` });
          break;
        }
        case 'delete': {
          if (!rec.cordoned) throw new CubeError('CONFLICT', `node ${nodeID} must be cordoned before it is deleted`);
          // Its next heartbeat would register it again at once.
          if (this.o.nodes.inProcess.some((n) => n.nodeID === nodeID)) throw new CubeError('CONFLICT', `node ${nodeID} is this daemon's own node (role all) and cannot be deleted; stop the daemon instead`);
          const held = await this.store.listSandboxes({ nodeID });
          if (held.length > 0) throw new CubeError('CONFLICT', `node ${nodeID} still holds ${held.length} sandbox(es) (${held.filter((s) => s.state === 'lost').length} lost); drain --evict it or destroy them first`);
          await this.store.deleteNode(nodeID);
          this.o.nodes.forget(nodeID);
          await this.appendEvent({ kind: 'node.deleted', nodeID, message: `node ${nodeID} deleted from the registry` });
          this.broadcast({ type: 'node.removed', nodeID });
          const gone = clusterNodeView({ ...rec, cordoned: true }, undefined, false, Date.now(), 0);
          return gone;
        }
      }
      const view = (await this.listNodes()).find((n) => n.nodeID === nodeID)!;
      this.broadcast({ type: 'node', node: view });
      return view;
    });
  }

  /**
   * Carries out the drain evictions whose deadline passed (one replica at a time, under a lease).
   * The deadline is cleared once the node holds no record: a failed destroy is tried again.
   */
  private async evictDue(): Promise<void> {
    const due = (await this.store.listNodes()).filter((n) => n.evictAt !== undefined && n.evictAt <= Date.now());
    if (due.length === 0 || !(await this.store.holdLease(EVICT_LEASE, this.o.replicaID, EVICT_LEASE_MS))) return;
    for (const n of due) {
      await this.evict(n.nodeID);
      if ((await this.store.listSandboxes({ nodeID: n.nodeID })).length > 0) continue;
      const cur = await this.store.getNode(n.nodeID);
      if (cur?.evictAt !== undefined) await this.store.putNode(withoutEviction(cur));
      await this.appendEvent({ kind: 'node.draining', nodeID: n.nodeID, message: `node ${n.nodeID}: drain deadline ${isoTime(n.evictAt!)} reached, its sandboxes were destroyed (by ${this.o.replicaID})` });
    }
  }

  private async evict(nodeID: string): Promise<void> {
    for (const s of await this.store.listSandboxes({ nodeID }).catch(() => [])) {
      // A lost node's sandboxes are deleted too: destroyed there if it comes back (destroySandbox).
      await this.destroySandbox(s.sandboxID, 'system:drain').catch((err: unknown) => this.log.error({ err, sandboxID: s.sandboxID }, 'drain eviction failed'));
    }
  }

  // --- config, templates, events, watch

  config(): ConfigView {
    return this.cfg.view();
  }

  async reloadConfig(actor?: string): Promise<ReloadResult> {
    const r = await this.cfg.reload();
    await audit(this.store, actor, 'config.reload', this.cfg.dir, r.ok ? 'ok' : (r.error ?? []).map((e) => `${e.path}: ${e.message}`).join('; '), { version: r.version, replica: this.o.replicaID });
    return r;
  }

  /**
   * Sets one key of the cluster's config: compare-and-set over the version this replica runs, so
   * of two concurrent sets (on any replicas) one wins and the other answers 409 with the version
   * in force; never both "ok" with one lost. The files are not written: they only seed an empty
   * store (GET /admin/v1/config exports what is in force). Solo, the files are the cluster's:
   * written, then recorded the same way.
   */
  setConfig(path: string, value: unknown, actor?: string): Promise<ReloadResult> {
    return audited(this.store, actor, 'config.set', path, () => (this.o.solo ? this.cfg.set(path, value, actor) : this.cfg.change(path, value, actor)), { value, replica: this.o.replicaID });
  }

  /**
   * The config's authority (ConfigStore.useAuthority): records `next` as the version after
   * `over` if that is still the one in force in the store; otherwise answers the store's.
   */
  private async commitConfig(next: Config, over: ConfigVersion, meta: ConfigChangeMeta, changes: ConfigChange[]): Promise<ConfigCommit> {
    const what = changes.map((c) => `${c.path} ${JSON.stringify(c.from)} -> ${JSON.stringify(c.to)}`).join(', ');
    const reason = meta.reason ?? `files of ${this.o.replicaID}: ${changes.map((c) => c.path).join(', ')}`;
    const rec = { version: over.version + 1, at: new Date().toISOString(), actor: meta.actor ?? this.o.replicaID, reason, master: next.master, cubelet: next.cubelet };
    if (await this.store.casConfigHead(rec, over.version)) {
      await this.appendEvent({ kind: 'config.reloaded', message: `config version ${rec.version} (${reason}, by ${rec.actor}) in force on ${this.o.replicaID}: ${what}` });
      return { won: true, version: rec.version };
    }
    const head = await this.store.configHead();
    if (!head) throw new CubeError('STATE_UNAVAILABLE', 'the cluster has no config in force (its store was emptied); a replica seeds it again within a tick');
    // A set that lost answers 409 to its caller; an edit of the files has no caller to tell.
    if (meta.files) await this.appendEvent({ kind: 'config.rejected', code: 130409, message: `the files of ${this.o.replicaID} changed (${what}) but version ${head.version} (${head.reason}, by ${head.actor}) was recorded first; the cluster's version stays` });
    return { won: false, head: { version: head.version, config: { master: head.master, cubelet: head.cubelet } as Config, actor: head.actor, reason: head.reason } };
  }

  /**
   * Puts the cluster's config (the store's) in force on this replica; an empty store is seeded
   * from this replica's config. Runs at start and on every tick, so every replica runs the
   * version in force within a tick. The store is read in the config's queue: a read that a
   * change made here overtook cannot put an older version back.
   */
  private async followConfig(): Promise<void> {
    const r = await this.cfg.adopt(async (cur) => {
      const head = await this.store.configHead();
      if (head) return { version: head.version, config: { master: head.master, cubelet: head.cubelet } as Config };
      // Numbered after every version the history or this replica ran, so none is reused.
      const version = Math.max((await this.store.latestConfigVersion())?.version ?? 0, cur.version) + 1;
      const seeded = await this.store.casConfigHead({ version, at: new Date().toISOString(), actor: this.o.replicaID, reason: `seeded from the files of ${this.o.replicaID}`, master: cur.config.master, cubelet: cur.config.cubelet }, 0);
      const now = seeded ? undefined : await this.store.configHead();
      return now ? { version: now.version, config: { master: now.master, cubelet: now.cubelet } as Config } : { version, config: cur.config };
    });
    if (r.changes.length > 0) await this.appendEvent({ kind: 'config.reloaded', message: `config version ${r.version} in force on ${this.o.replicaID}: ${r.changes.map((c) => `${c.path} ${JSON.stringify(c.from)} -> ${JSON.stringify(c.to)}`).join(', ')}` });
  }

  /**
   * configFromFiles: the files, as loaded at start, become the config in force: the version in
   * force in the store when they give its config, else a new version after every one the store
   * holds (a restart never renumbers over the history).
   */
  private async recordFiles(): Promise<void> {
    const head = await this.store.configHead();
    const latest = Math.max(head?.version ?? 0, (await this.store.latestConfigVersion())?.version ?? 0);
    if (!this.cfg.resumeNumbering(head && { version: head.version, config: { master: head.master, cubelet: head.cubelet } as Config }, latest)) return;
    const v = this.cfg.versionInfo;
    const rec = { version: v.version, at: v.loadedAt, actor: this.o.replicaID, reason: 'start', master: v.config.master, cubelet: v.config.cubelet };
    if (!(await this.store.casConfigHead(rec, head?.version ?? 0))) throw new CubeError('CONFLICT', `the config in the store moved on while ${this.o.replicaID} started; is another replica using this store?`);
  }

  /**
   * Writes node `nodeID`'s template list in the registry when it differs from what this replica
   * wrote last: from its heartbeats, and at once after an import, build, tag or rm through this
   * replica (LayerRelay.templatesChanged: the client's next list shows its write).
   */
  async noteNodeTemplates(nodeID: string, templates: string[]): Promise<void> {
    const key = templates.join('\0');
    if (this.templatesWritten.get(nodeID) === key) return;
    this.templatesWritten.delete(nodeID);
    await this.store.setNodeTemplates(nodeID, templates);
    this.templatesWritten.set(nodeID, key);
  }

  /**
   * The templates and the nodes holding them. solo: from the in-process nodes as they are now, so
   * a client's own import, build, tag or rm shows in its next list (the registry is written from
   * heartbeats, up to an interval later: the list right after an import missed it under load).
   */
  async templates(): Promise<{ templateID: string; nodes: string[] }[]> {
    if (!this.o.solo) return this.store.listTemplates();
    const by = new Map<string, string[]>();
    for (const v of (await this.inProcessViews()).values()) for (const t of v.templates) by.set(t, [...(by.get(t) ?? []), v.nodeID]);
    return [...by].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)).map(([templateID, nodes]) => ({ templateID, nodes }));
  }

  events(opts?: { sinceID?: number; beforeID?: number; limit?: number }): Promise<EventView[]> {
    return this.store.listEvents(opts);
  }

  async snapshot(): Promise<Snapshot> {
    return snapshotOf(this.store, await this.listNodes(), this.cfg.view(), this.stats.view());
  }

  watch(listener: (m: WatchMessage) => void, opts?: { eventsOnly?: boolean }): () => void {
    return this.watchers.add(listener, opts);
  }

  /** The lost-node sweep (one replica does it, under a lease), then the watch deltas. */
  private async tick(): Promise<void> {
    if (this.ticking) return;
    this.ticking = true;
    const now = Date.now();
    const timeout = this.cfg.config.master.scheduler.heartbeat_timeout_ms;
    if (this.lastTickAt > 0 && now - this.lastTickAt > timeout / 2) this.blindAt = now;
    this.lastTickAt = now;
    try {
      await sweepLostNodes(this.store, this.cfg.config.master, now, this.o.replicaID, this.missingSince, this.blindAt);
      if (!this.o.solo) await this.followConfig();
      if (await this.store.holdLease(ARCHIVE_LEASE, this.o.replicaID, 5000)) await this.store.archiveEvents();
      // Evictions take as long as their destroys: beside the tick, one run at a time.
      this.evicting ??= this.evictDue()
        .catch((err: unknown) => this.log.warn({ err: toCubeError(err).message }, 'drain eviction failed'))
        .finally(() => (this.evicting = undefined));
      if (this.watchers.size > 0) await this.sendDeltas();
    } catch (err) {
      if (isConnectionError(err)) this.blindAt = Date.now();
      this.log.warn({ err: toCubeError(err).message }, 'control tick failed');
    } finally {
      this.ticking = false;
    }
  }

  // Other replicas and the nodes change the state too, so deltas come from the store, not from
  // this replica's own calls.
  private async sendDeltas(): Promise<void> {
    const s = this.seen;
    // Every replica's metrics registry watches for events alone: listing and diffing every node
    // and sandbox each second for it was 17% of the control's CPU at 1000 nodes with no watcher else.
    if (!this.watchers.wantState) return this.o.solo ? undefined : this.eventDeltas();
    diff(s.nodes, (await this.listNodes()).map((n) => [n.nodeID, n, JSON.stringify({ ...n, lastSeen: 0 })]), (node) => this.broadcast({ type: 'node', node }), (nodeID) => this.broadcast({ type: 'node.removed', nodeID }));
    if (!this.o.solo) await this.storeDeltas();
    const stats = this.stats.view();
    const sk = JSON.stringify(stats);
    if (sk !== s.stats) {
      s.stats = sk;
      this.broadcast({ type: 'stats', stats });
    }
  }

  /** Events and sandbox changes any replica or node made, from the store. */
  private async storeDeltas(): Promise<void> {
    const s = this.seen;
    await this.eventDeltas();
    diff(s.sandboxes, (await this.store.listSandboxes()).map((r) => { const v = publicView(r); return [v.sandboxID, v, JSON.stringify(v)]; }), (sandbox) => this.broadcast({ type: 'sandbox', sandbox }), (sandboxID) => this.broadcast({ type: 'sandbox.removed', sandboxID }));
  }

  /** Events any replica or node appended, from the store. */
  private async eventDeltas(): Promise<void> {
    const s = this.seen;
    if (s.eventID < 0) s.eventID = (await this.store.listEvents({ limit: 1 }))[0]?.id ?? 0;
    for (const event of await this.store.listEvents({ sinceID: s.eventID, limit: 1000 })) {
      s.eventID = event.id;
      this.broadcast({ type: 'event', event });
    }
  }

  private async appendEvent(e: Omit<EventView, 'id' | 'at'> & { at?: number; kind: EventKind }): Promise<void> {
    const event = await this.store.appendEvent({ ...e, at: e.at ?? Date.now() });
    if (this.o.solo) this.broadcast({ type: 'event', event });
  }

  /** A notice a heartbeat carried: once per sender and seq (older nodes number none: appended as it comes). */
  private async appendNodeEvent({ seq, ...e }: NodeNotice, sender: string | undefined): Promise<void> {
    if (sender === undefined || seq === undefined) return this.appendEvent(e);
    const event = await this.store.appendNodeEvent(e, { sender, seq });
    if (event && this.o.solo) this.broadcast({ type: 'event', event });
  }

  /** solo: what an in-process node reports reaches the watchers (and its notices the history) at once. */
  private onNodeEvent(e: NodeEvent): void {
    if (e.type === 'sandbox') this.broadcast({ type: 'sandbox', sandbox: e.sandbox });
    else if (e.type === 'sandbox.removed') this.broadcast({ type: 'sandbox.removed', sandboxID: e.sandboxID });
    else void this.appendEvent(e.event).catch((err: unknown) => this.log.error({ err }, 'could not record a node notice'));
  }

  private broadcast(m: WatchMessage): void {
    this.watchers.broadcast(m);
  }

  /**
   * Runs `fn` holding the sandbox's operation lock. A short hold (a heartbeat reconciling the
   * record) is waited out; 130490 (busy) when another operation keeps it longer.
   */
  private async locked<T>(sandboxID: string, fn: (fence: string) => Promise<T>): Promise<T> {
    let token = await this.store.acquireLock(sandboxID, OP_LEASE_MS);
    for (const until = Date.now() + LOCK_WAIT_MS; token === undefined && Date.now() < until; ) {
      await new Promise((r) => setTimeout(r, 25));
      token = await this.store.acquireLock(sandboxID, OP_LEASE_MS);
    }
    if (token === undefined) throw new CubeError('SANDBOX_BUSY', `sandbox ${sandboxID} has another operation in progress`, { retryAfter: 1 });
    return this.holding(sandboxID, token, fn);
  }

  /** Like locked(), but a held lock means "skip": the holder writes the outcome. */
  private async withLock(sandboxID: string, fn: (fence: string) => Promise<void>): Promise<void> {
    const token = await this.store.acquireLock(sandboxID, OP_LEASE_MS);
    if (token !== undefined) await this.holding(sandboxID, token, fn);
  }

  /** Runs `fn` with the lease `token` (its fence for node calls), renewing it, and releases it after. */
  private async holding<T>(sandboxID: string, token: string, fn: (fence: string) => Promise<T>): Promise<T> {
    const renew = setInterval(() => {
      void this.store.renewLock(sandboxID, token, OP_LEASE_MS).then(
        (held) => held || this.log.warn({ sandboxID, token }, 'operation lease lapsed before the operation ended'),
        () => undefined,
      );
    }, OP_LEASE_MS / 3);
    try {
      return await fn(token);
    } finally {
      clearInterval(renew);
      await this.store.releaseLock(sandboxID, token).catch(() => undefined);
    }
  }
}

/** A create's node did not answer (internal: createSandbox tries another). */
class UnreachableNode extends Error {
  constructor(
    readonly nodeID: string,
    override readonly cause: CubeError,
  ) {
    super(cause.message);
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

/** Calls `changed` for entries whose key is new or different and `removed` for those gone; updates `seen`. */
function diff<T>(seen: Map<string, string>, now: [string, T, string][], changed: (v: T) => void, removed: (id: string) => void): void {
  const ids = new Set<string>();
  for (const [id, v, key] of now) {
    ids.add(id);
    if (seen.get(id) !== key) {
      seen.set(id, key);
      changed(v);
    }
  }
  for (const id of [...seen.keys()]) {
    if (ids.has(id)) continue;
    seen.delete(id);
    removed(id);
  }
}
