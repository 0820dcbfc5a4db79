// StateStore for a cluster: MySQL holds the records (and is the source of truth for which
// sandboxes exist), Redis the live state (routes, metrics, locks, leases, events). Writes go
// to MySQL first, then Redis; a Redis failure in between, or a Redis restart (it keeps nothing
// on disk), marks the routes dirty and the next sandbox read rebuilds them from MySQL, so a
// sandbox is never recorded but missing from the routes.
import { newestOfEachClass, type EventView } from '../../model/event.js';
import type { NodeView } from '../../model/node.js';
import type { VolumeRecord } from '../../model/volume.js';
import { type ListFilter, type SandboxRecord, type SandboxState, type SnapshotRecord } from '../../model/sandbox.js';
import type { ApiKeyRecord, KeyUsage, QuotaClaim, QuotaRefusal } from '../../model/api-key.js';
import {
  matchesFilter,
  type ApiKeyPatch,
  type AuditRecord,
  type ConfigVersionRecord,
  type CreateKeyRecord,
  type NodeRecord,
  type StateStore,
} from '../types.js';
import { GroupCommit } from './group-commit.js';
import type { MysqlLifecycle } from './mysql-lifecycle.js';
import { MysqlRecords } from './mysql-records.js';
import { RedisLive } from './redis-live.js';
import { isConnectionError, unavailable } from './retry.js';

/** How far back archiveEvents looks behind the last id it archived. */
const ARCHIVE_OVERLAP = 500;
/** A registry copy is trusted at most this long even when its version did not move (edits made outside cubed). */
const REGISTRY_MAX_AGE_MS = 5000;

/** A build's placement record is kept this long (the E2B SDK polls a build's status while it runs; a week covers the slowest). */
const BUILD_KEEP_MS = 7 * 24 * 3600_000;

/** A template build a control replica handed to a compute node (templates/cluster.ts). */
export interface BuildPlacement {
  buildID: string;
  templateID: string;
  nodeID: string;
  /** The build's final status record (templates/build/build.ts BuildRecord), once finished or its node went: answered from here on, whatever the node says later. */
  final?: unknown;
}

export interface ClusterStoreOptions {
  redisURL: string;
  mysqlURL: string;
  /** Prefix of every Redis key, e.g. 'cube:v1:' (tests use a unique one). */
  keyPrefix?: string;
  eventRetention?: number;
}

// A made sandbox's `createBy` (SandboxRecord) stays on the route until markAnswered, which the
// create sends once its answer is in the client's socket; MySQL keeps it. A replica that dies
// before that leaves the mark, and the reconcile undoes the create past its deadline.
export class ClusterStore implements StateStore {
  readonly mysql: MysqlRecords;
  readonly live: RedisLive;
  /** In MySQL alone: a tombstone or a queued delivery outlives a Redis restart. */
  get lifecycle(): MysqlLifecycle {
    return this.mysql.lifecycle;
  }
  private routesDirty = false;
  /** Reconnects to Redis so far: a route read that overlapped one may have met a Redis that came back empty (fromRoutes). */
  private reconnects = 0;
  private reconciling?: Promise<void>;
  private readonly eventRetention: number;
  /** Events Redis numbered but MySQL did not take yet (it was down): written with the next append. */
  private unsaved: EventView[] = [];
  private appended = 0;
  private archivedTo = 0;
  private registry?: { version: string; at: number; recs: Promise<NodeRecord[]> };

  constructor(opts: ClusterStoreOptions) {
    this.mysql = new MysqlRecords(opts.mysqlURL);
    this.eventRetention = opts.eventRetention ?? 10_000;
    this.live = new RedisLive(opts.redisURL, opts.keyPrefix ?? 'cube:v1:', this.eventRetention);
    // 'ready' after a reconnect: Redis may have restarted empty.
    let connected = false;
    this.live.redis.on('ready', () => {
      if (connected) {
        this.routesDirty = true;
        this.reconnects++;
      }
      connected = true;
    });
  }

  async init(): Promise<void> {
    await this.mysql.init().catch((e) => Promise.reject(isConnectionError(e) ? unavailable('MySQL', e) : e));
    await this.live.init().catch((e) => Promise.reject(unavailable('Redis', e)));
    await this.reconcileRoutes();
  }

  async close(): Promise<void> {
    await this.live.close();
    await this.mysql.close();
  }

  /** Rebuilds the routes from MySQL; concurrent callers share one run. */
  async reconcileRoutes(): Promise<void> {
    this.reconciling ??= (async () => {
      try {
        this.routesDirty = false;
        const live = await this.mysql.liveSandboxes();
        const listed = new Set(live.map((s) => s.sandboxID));
        // A route missing from the snapshot is either deleted or created since it was taken: only the deleted go.
        const deleted = await this.mysql.deletedAmong((await this.live.routeIDs()).filter((id) => !listed.has(id)));
        await this.live.replaceRoutes(live, [...deleted]);
        // Routes written by a version that did not count quota usage, or whose script failed halfway: counted again.
        await this.live.quota.rebuild();
        await this.restoreEvents();
      } catch (e) {
        this.routesDirty = true;
        throw e;
      } finally {
        this.reconciling = undefined;
      }
    })();
    return this.reconciling;
  }

  private async routes(): Promise<void> {
    if (this.routesDirty) await this.reconcileRoutes();
  }

  /**
   * A read of the routes. One that overlapped a reconnect (its command retried on the new
   * connection, after routes() had passed) or a rebuild may have read a Redis that came back
   * empty: unless `complete`, it is read again once the routes are rebuilt. A miss there was a
   * 404 for a sandbox that exists (a kill after a Redis restart: issue 24).
   */
  private async fromRoutes<T>(read: () => Promise<T>, complete: (v: T) => boolean): Promise<T> {
    const epoch = this.reconnects;
    await this.routes();
    const v = await read();
    if (complete(v) || (epoch === this.reconnects && !this.reconciling)) return v;
    if (this.reconciling) await this.reconciling;
    await this.routes();
    return read();
  }

  /** MySQL then Redis; if Redis fails the record stands and the routes get rebuilt. */
  private async writeThrough(write: () => Promise<void>, route: () => Promise<void>): Promise<void> {
    await write();
    try {
      await route();
    } catch (e) {
      this.routesDirty = true;
      throw e;
    }
  }

  async putSandbox(rec: SandboxRecord): Promise<number> {
    let generation = 0;
    await this.writeThrough(
      async () => void (generation = await this.mysql.putSandbox(rec)),
      () => this.live.putRoute({ ...rec, generation }),
    );
    return generation;
  }

  async putSandboxIf(rec: SandboxRecord, expected: number): Promise<number> {
    const generation = await this.mysql.putSandboxIf(rec, expected);
    if (generation > 0)
      await this.writeThrough(
        async () => undefined,
        () => this.live.putRoute({ ...rec, generation }),
      );
    else await this.repairRoute(rec.sandboxID);
    return generation;
  }

  async markAnswered(sandboxID: string): Promise<void> {
    await this.live.markAnswered(sandboxID);
  }

  async deleteSandboxIf(sandboxID: string, generation: number): Promise<boolean> {
    const done = await this.mysql.markSandboxDeleted(sandboxID, generation);
    if (done)
      await this.writeThrough(
        async () => undefined,
        () => this.live.deleteRoute(sandboxID),
      );
    else await this.repairRoute(sandboxID);
    return done;
  }

  /**
   * After a refused compare-and-set: the generation the caller read (from the route) may lag
   * MySQL's, when a replica died between its MySQL write and its Redis one (kill -9 mid-create:
   * the record running in MySQL, its route still creating). Nothing else would repair that route
   * while the replicas stay up (routesDirty is the dead replica's), and every heartbeat's update
   * of it was refused the same way: a record stayed creating for good. The route is set to
   * MySQL's record (newer generations only, see putRoute), or removed when MySQL deleted it.
   * Best effort: the refusal stands either way, and a repair that fails leaves the routes to be
   * rebuilt by the next read.
   */
  private async repairRoute(sandboxID: string): Promise<void> {
    try {
      const cur = await this.mysql.getLiveSandbox(sandboxID);
      if (cur) await this.live.putRoute({ ...cur, generation: cur.generation ?? 0 });
      else if (await this.mysql.wasDeleted(sandboxID)) await this.live.deleteRoute(sandboxID);
    } catch {
      this.routesDirty = true;
    }
  }

  /** Sets state and reason unless another write comes first (then false, as for a missing record). */
  async updateSandboxState(sandboxID: string, state: SandboxState, reason?: string): Promise<boolean> {
    const found = await this.getSandbox(sandboxID);
    if (!found) return false;
    const { reason: _previous, ...rest } = found;
    return (await this.putSandboxIf(reason === undefined ? { ...rest, state } : { ...rest, state, reason }, found.generation ?? 0)) > 0;
  }

  getSandbox(sandboxID: string): Promise<SandboxRecord | undefined> {
    return this.fromRoutes(
      () => this.live.getRoute(sandboxID),
      (rec) => rec !== undefined,
    );
  }

  async listSandboxes(filter?: ListFilter): Promise<SandboxRecord[]> {
    const all = await this.fromRoutes(
      () => this.live.listRoutes(),
      () => false,
    );
    all.sort((a, b) => a.startedAt - b.startedAt || a.sandboxID.localeCompare(b.sandboxID));
    return all.filter((r) => matchesFilter(r, filter));
  }

  /**
   * Done once MySQL took it: the delete is remembered there, and a route Redis could not drop is
   * rebuilt from MySQL by the next read. An error here means nothing was deleted (a delete that
   * answered 503 while being done was a lie the caller could not settle).
   */
  async deleteSandbox(sandboxID: string): Promise<void> {
    await this.mysql.markSandboxDeleted(sandboxID);
    try {
      await this.live.deleteRoute(sandboxID);
    } catch {
      this.routesDirty = true;
    }
  }

  /** From MySQL, where the compare-and-set happens: a route in Redis can lag it (rebuilt from a snapshot after a reconnect). */
  getSandboxForWrite(sandboxID: string): Promise<SandboxRecord | undefined> {
    return this.mysql.getLiveSandbox(sandboxID);
  }

  wasDeleted(sandboxID: string): Promise<boolean> {
    return this.mysql.wasDeleted(sandboxID);
  }

  /** Marks every sandbox of a node (e.g. lost: never silently dropped); reads MySQL, not the routes. */
  async markNodeSandboxes(nodeID: string, state: SandboxState, reason: string): Promise<SandboxRecord[]> {
    const recs = (await this.mysql.liveSandboxes()).filter((r) => r.nodeID === nodeID && r.state !== state);
    const marked: SandboxRecord[] = [];
    // A record written meanwhile (an operation, the node's own report) is newer than this verdict.
    for (const rec of recs) if ((await this.putSandboxIf({ ...rec, state, reason }, rec.generation ?? 0)) > 0) marked.push({ ...rec, state, reason });
    return marked;
  }

  /** A Redis without the event counter (restarted empty) gets the stream and counter back from MySQL. */
  private async restoreEvents(): Promise<void> {
    if (await this.live.hasEventSeq()) return;
    await this.flushEvents();
    const { maxID, events } = await this.mysql.latestEvents(this.eventRetention);
    await this.live.restoreEvents(maxID, events);
  }

  /**
   * Redis numbers the event (one counter: every replica's events in one order) and streams it;
   * MySQL keeps it, so a Redis restart loses neither the history nor the numbering. With MySQL
   * away the event is kept here and written with a later one. Events appended while a batch is
   * being written go together in the next (one script call, one INSERT): a heartbeat of 1000
   * simulated nodes carries one event per create, and appending them one by one (a Redis call
   * and a MySQL commit each) took 17.6 s for one heartbeat in the 1000-node bench.
   */
  async appendEvent(e: Omit<EventView, 'id'>): Promise<EventView> {
    return (await this.eventBatches.add({ e }))!;
  }

  appendNodeEvent(e: Omit<EventView, 'id'>, origin: { sender: string; seq: number }): Promise<EventView | undefined> {
    return this.eventBatches.add({ e, origin });
  }

  private readonly eventBatches = new GroupCommit<{ e: Omit<EventView, 'id'>; origin?: { sender: string; seq: number } }, EventView | undefined>(async (es) => {
    let out = await this.live.appendEvents(es);
    if (!out) {
      await this.restoreEvents();
      out = await this.live.appendEvents(es);
      if (!out) throw unavailable('Redis', new Error('event counter missing after restoring it'));
    }
    const evs = out.filter((e) => e !== undefined);
    this.unsaved.push(...evs);
    await this.flushEvents().catch(() => undefined); // unsaved events stay queued and go with the next flush
    const before = this.appended;
    this.appended += evs.length;
    if (Math.floor(before / 1000) !== Math.floor(this.appended / 1000)) await this.mysql.pruneEvents(this.eventRetention).catch(() => undefined); // retried at the next thousand
    return out;
  });

  private async flushEvents(): Promise<void> {
    if (this.unsaved.length === 0) return;
    const batch = this.unsaved;
    this.unsaved = [];
    try {
      await this.mysql.putEvents(batch);
    } catch (e) {
      // Kept (the newest, up to the retention) for the next append.
      this.unsaved = newestOfEachClass([...batch, ...this.unsaved], this.eventRetention);
      throw e;
    }
  }

  /**
   * Copies what the event stream holds into MySQL (ids already there are skipped): a replica
   * killed between numbering an event in Redis and writing it to MySQL leaves it in the stream
   * only. Reads back ARCHIVE_OVERLAP ids each time, since such an event may sit below ids other
   * replicas wrote after it. Call it periodically from one replica.
   */
  async archiveEvents(): Promise<void> {
    const events = await this.live.listEvents({ sinceID: Math.max(0, this.archivedTo - ARCHIVE_OVERLAP), limit: 10_000 });
    await this.mysql.putEvents(events);
    this.archivedTo = Math.max(this.archivedTo, events.at(-1)?.id ?? 0);
  }

  async listEvents(opts?: { sinceID?: number; beforeID?: number; limit?: number }): Promise<EventView[]> {
    await this.routes();
    return this.live.listEvents(opts);
  }

  putConfigVersion(rec: ConfigVersionRecord): Promise<void> {
    return this.mysql.putConfigVersion(rec);
  }

  configHead(): Promise<ConfigVersionRecord | undefined> {
    return this.mysql.configHead();
  }

  casConfigHead(rec: ConfigVersionRecord, expected: number): Promise<boolean> {
    return this.mysql.casConfigHead(rec, expected);
  }

  async latestConfigVersion(): Promise<ConfigVersionRecord | undefined> {
    return (await this.mysql.listConfigVersions(1))[0];
  }

  listConfigVersions(limit?: number): Promise<ConfigVersionRecord[]> {
    return this.mysql.listConfigVersions(limit);
  }

  appendAudit(rec: Omit<AuditRecord, 'id' | 'actorName'>): Promise<AuditRecord> {
    return this.mysql.appendAudit(rec);
  }

  listAudit(opts?: { limit?: number; actor?: string }): Promise<AuditRecord[]> {
    return this.mysql.listAudit(opts);
  }

  async putNode(rec: NodeRecord): Promise<void> {
    await this.mysql.putNode(rec);
    await this.live.bumpRegistryVersion();
  }

  getNode(nodeID: string): Promise<NodeRecord | undefined> {
    return this.mysql.getNode(nodeID);
  }

  /**
   * The registry, re-read from MySQL only when its version in Redis moved (every putNode and
   * deleteNode bumps it) or the copy is REGISTRY_MAX_AGE_MS old: placements read it per create,
   * and at 1000 nodes a MySQL read per create costs more than the decision.
   */
  async listNodes(): Promise<NodeRecord[]> {
    const version = await this.live.registryVersion();
    const c = this.registry;
    if (c && c.version === version && Date.now() - c.at < REGISTRY_MAX_AGE_MS) return [...(await c.recs)];
    const recs = this.mysql.listNodes();
    this.registry = { version, at: Date.now(), recs };
    recs.catch(() => (this.registry = undefined));
    return [...(await recs)];
  }

  async deleteNode(nodeID: string): Promise<void> {
    await this.mysql.deleteNode(nodeID);
    await this.live.bumpRegistryVersion();
    await this.live.deleteNodeMetrics(nodeID);
  }

  setNodeTemplates(nodeID: string, templateIDs: string[]): Promise<void> {
    return this.mysql.setNodeTemplates(nodeID, templateIDs);
  }

  listTemplates(): Promise<{ templateID: string; nodes: string[] }[]> {
    return this.mysql.listTemplates();
  }

  // --- live state: Redis alone (liveness must not depend on MySQL)

  /** Where a template build runs (`newest`: it is its template's newest, which uploads go to); kept a week. */
  async putBuild(b: BuildPlacement, newest = false): Promise<void> {
    await this.live.putBuild(b.buildID, JSON.stringify(b), BUILD_KEEP_MS, newest ? b.templateID : undefined);
  }

  async getBuild(buildID: string): Promise<BuildPlacement | undefined> {
    const raw = await this.live.getBuild(buildID);
    return raw === undefined ? undefined : (JSON.parse(raw) as BuildPlacement);
  }

  /** The newest build of template `templateID` (the one a COPY upload belongs to). */
  async newestBuild(templateID: string): Promise<BuildPlacement | undefined> {
    const id = await this.live.latestBuild(templateID);
    return id === undefined ? undefined : this.getBuild(id);
  }

  putNodeMetrics(views: NodeView[], ttlMs: number): Promise<void> {
    return this.live.putNodeMetrics(views, ttlMs);
  }

  getNodeMetrics(nodeIDs: string[]): Promise<Map<string, NodeView>> {
    return this.live.getNodeMetrics(nodeIDs);
  }

  touchNodeMetrics(seen: { nodeID: string; lastSeen: number }[], ttlMs: number): Promise<string[]> {
    return this.live.touchNodeMetrics(seen, ttlMs);
  }

  markNodeLost(nodeID: string): Promise<boolean> {
    return this.live.markNodeLost(nodeID);
  }

  clearNodeLost(nodeID: string): Promise<void> {
    return this.live.clearNodeLost(nodeID);
  }

  lostNodes(nodeIDs: string[]): Promise<Set<string>> {
    return this.live.lostNodes(nodeIDs);
  }

  incInFlight(nodeID: string): Promise<number> {
    return this.live.incInFlight(nodeID);
  }

  decInFlight(nodeID: string): Promise<void> {
    return this.live.decInFlight(nodeID);
  }

  inFlight(): Promise<Map<string, number>> {
    return this.live.inFlight();
  }

  acquireLock(sandboxID: string, ttlMs: number): Promise<string | undefined> {
    return this.live.acquireLock(sandboxID, ttlMs);
  }

  renewLock(sandboxID: string, token: string, ttlMs: number): Promise<boolean> {
    return this.live.renewLock(sandboxID, token, ttlMs);
  }

  releaseLock(sandboxID: string, token: string): Promise<boolean> {
    return this.live.releaseLock(sandboxID, token);
  }

  holdLease(name: string, holder: string, ttlMs: number): Promise<boolean> {
    return this.live.holdLease(name, holder, ttlMs);
  }

  releaseLease(name: string, holder: string): Promise<boolean> {
    return this.live.releaseLease(name, holder);
  }

  // --- API keys: records in MySQL; quota usage and claims in Redis (beside the routes they count)

  putApiKey(rec: ApiKeyRecord): Promise<boolean> {
    return this.mysql.putApiKey(rec);
  }

  getApiKey(id: string): Promise<ApiKeyRecord | undefined> {
    return this.mysql.getApiKey(id);
  }

  apiKeyByHash(hash: string): Promise<ApiKeyRecord | undefined> {
    return this.mysql.apiKeyByHash(hash);
  }

  listApiKeys(): Promise<ApiKeyRecord[]> {
    return this.mysql.listApiKeys();
  }

  updateApiKey(id: string, patch: ApiKeyPatch): Promise<ApiKeyRecord | undefined> {
    return this.mysql.updateApiKey(id, patch);
  }

  deleteApiKey(id: string): Promise<boolean> {
    return this.mysql.deleteApiKey(id);
  }

  /** Counts what the routes hold: they are rebuilt first when dirty (a Redis restart), or usage would read zero. */
  async claimQuota(claim: QuotaClaim): Promise<QuotaRefusal | undefined> {
    await this.routes();
    return this.live.quota.claim(claim);
  }

  releaseQuota(owner: string, sandboxID: string): Promise<void> {
    return this.live.quota.release(owner, sandboxID);
  }

  async quotaUsage(owners: string[]): Promise<Map<string, KeyUsage>> {
    await this.routes();
    return this.live.quota.usage(owners);
  }

  // --- idempotent creates: MySQL alone (they must outlive a Redis restart)

  claimCreateKey(rec: CreateKeyRecord, over?: string): Promise<CreateKeyRecord> {
    return this.mysql.claimCreateKey(rec, over);
  }

  getCreateKey(key: string): Promise<CreateKeyRecord | undefined> {
    return this.mysql.getCreateKey(key);
  }

  settleCreateKey(key: string, sandboxID: string, outcome: NonNullable<CreateKeyRecord['outcome']>): Promise<boolean> {
    return this.mysql.settleCreateKey(key, sandboxID, outcome);
  }

  putSnapshot(rec: SnapshotRecord): Promise<void> {
    return this.mysql.putSnapshot(rec);
  }

  getSnapshot(snapshotID: string): Promise<SnapshotRecord | undefined> {
    return this.mysql.getSnapshot(snapshotID);
  }

  listSnapshots(): Promise<SnapshotRecord[]> {
    return this.mysql.listSnapshots();
  }

  deleteSnapshot(snapshotID: string): Promise<boolean> {
    return this.mysql.deleteSnapshot(snapshotID);
  }

  addVolume(rec: VolumeRecord): Promise<boolean> {
    return this.mysql.addVolume(rec);
  }

  getVolume(volumeID: string): Promise<VolumeRecord | undefined> {
    return this.mysql.getVolume(volumeID);
  }

  listVolumes(): Promise<VolumeRecord[]> {
    return this.mysql.listVolumes();
  }

  deleteVolume(volumeID: string): Promise<boolean> {
    return this.mysql.deleteVolume(volumeID);
  }
}
