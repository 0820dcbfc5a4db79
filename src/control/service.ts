// The ControlPlane, the one implementation for every role, over a StateStore, a NodeDirectory,
// a NodeFeed and a ConfigOrigin (wiring.ts chooses them). `--role control`: stateless, any
// replica serves any request; records in MySQL and live state in Redis (ClusterStore), nodes
// reached through node RPC (RemoteNodes), their views and the other replicas' changes read from
// the store (StoreFeed), the store's config in force (StoreConfig). Role all: a cluster of one
// wired in-process (daemon.ts): the embedded store, the daemon's cubelet (LocalNodes,
// InProcessFeed), its files the cluster's config (FilesConfig). Nodes heartbeat every second
// with their view and sandbox list: that is how the records learn sandbox states (the node is
// their one writer) and how a lost node is noticed.
//
// This file is the facade and the tick; each job is a file of its own: heartbeats.ts (the node
// feed), sandboxes.ts (sandbox operations and snapshots), nodes.ts (node views, placement views,
// cordon, drain and delete), config-authority.ts (the cluster's config), watch.ts (the watch
// stream and the event history's writes), locks.ts (per-sandbox operation locks and fences).
import type { Logger } from 'pino';
import type { ConfigStore } from '../config/store.js';
import type { Heartbeat, HeartbeatAnswer } from '../cubelet/rpc-wire.js';
import type { NodeApi } from '../cubelet/types.js';
import { toCubeError } from '../errors.js';
import type { ConfigView, ReloadResult } from '../model/config.js';
import type { EventView } from '../model/event.js';
import type { NodeView } from '../model/node.js';
import type { CreateSandboxRequest, EgressRequest, ListFilter, PauseOptions, SandboxRecord } from '../model/sandbox.js';
import type { Snapshot, WatchMessage } from '../model/watch.js';
import { isConnectionError } from '../store/cluster/retry.js';
import type { StateStore } from '../store/types.js';
import { sweepLostNodes } from './cluster/lost-sweep.js';
import { ConfigAuthority, type ConfigOrigin } from './config-authority.js';
import type { ControlContext } from './context.js';
import type { ControlDeath, ControlPlane, NodeAction } from './control-plane.js';
import { CreateStats } from './create-stats.js';
import { Deaths } from './deaths.js';
import { Lifecycle } from './lifecycle/index.js';
import { Heartbeats } from './heartbeats.js';
import { SandboxLocks } from './locks.js';
import type { NodeDirectory } from './node-directory.js';
import type { NodeFeed } from './node-feed.js';
import { Nodes } from './nodes.js';
import { SandboxOps } from './sandboxes.js';
import { AuditTrail } from './audit-trail.js';
import { KeyBook } from './keys.js';
import type { SnapshotBook } from './snapshots.js';
import type { VolumeBook } from './volumes.js';
import { WatchStream } from './watch.js';

export interface ControlPlaneServiceOptions {
  store: StateStore;
  config: ConfigStore;
  log: Logger;
  /** Where the nodes are: remote (node RPC) or in this process (role all). */
  nodes: NodeDirectory;
  /**
   * How this replica learns the nodes' views and what other writers changed: asked of the nodes
   * in this process, pushed to watchers as it happens (role all), or read from the store, the
   * watch deltas polled each tick (a cluster).
   */
  feed: NodeFeed;
  /** Where the config in force comes from: the files (role all) or the store (a cluster). */
  configOrigin: ConfigOrigin;
  /** This replica's name (leases, logs). */
  replicaID: string;
  /** Watch deltas and the lost-node sweep run this often. */
  tickMs?: number;
}

/** One replica at a time copies the event stream into MySQL (ClusterStore.archiveEvents). */
const ARCHIVE_LEASE = 'event-archive';

export class ControlPlaneService implements ControlPlane {
  private readonly ctx: ControlContext;
  private readonly stats = new CreateStats();
  private readonly watchStream: WatchStream;
  private readonly configs: ConfigAuthority;
  private readonly nodes: Nodes;
  private readonly sandboxes: SandboxOps;
  private readonly feed: Heartbeats;
  private readonly deaths: Deaths;
  readonly lifecycle: Lifecycle;
  readonly snapshots: SnapshotBook;
  readonly volumes: VolumeBook;
  readonly keys: KeyBook;
  readonly audit: AuditTrail;
  private readonly unsubs: (() => void)[] = [];
  private timer?: NodeJS.Timeout;
  private ticking = false;
  private readonly missingSince = new Map<string, number>();
  /**
   * When this replica last could not watch the nodes (Redis or MySQL failed, or its own ticks
   * stalled: an overloaded process cannot tell a silent node from its own lag): lost detection
   * counts silence from then on (lost-sweep.ts).
   */
  private blindAt = 0;
  private lastTickAt = 0;

  constructor(private readonly o: ControlPlaneServiceOptions) {
    const ctx: ControlContext = { store: o.store, cfg: o.config, log: o.log, replicaID: o.replicaID, nodes: o.nodes, feed: o.feed };
    const locks = new SandboxLocks(o.store, o.log);
    this.ctx = ctx;
    this.watchStream = new WatchStream(ctx, { listNodes: () => this.nodes.listNodes(), stats: () => this.stats.view(), noted: (e) => this.deaths.noted(e) });
    this.configs = new ConfigAuthority(ctx, this.watchStream, o.configOrigin);
    this.deaths = new Deaths({ store: o.store, log: o.log, appendEvent: (e) => this.watchStream.appendEvent(e) });
    this.nodes = new Nodes(ctx, this.watchStream, (sandboxID, actor, death) => this.sandboxes.destroySandbox(sandboxID, actor, death));
    this.keys = new KeyBook(o.store, () => o.config.config.master);
    this.audit = new AuditTrail(o.store);
    this.sandboxes = new SandboxOps(ctx, this.nodes, locks, this.watchStream, this.stats, this.keys, this.deaths);
    this.feed = new Heartbeats(ctx, this.nodes, locks, this.watchStream, this.deaths, this.sandboxes.outcomes);
    this.lifecycle = new Lifecycle(ctx, (e) => this.watchStream.appendEvent(e));
    this.snapshots = this.sandboxes.snapshots;
    this.volumes = this.sandboxes.volumes;
  }

  async start(): Promise<void> {
    this.unsubs.push(...(await this.configs.start()));
    this.unsubs.push(...this.watchStream.start());
    this.timer = setInterval(() => void this.tick(), this.o.tickMs ?? 1000);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    clearInterval(this.timer);
    for (const u of this.unsubs.splice(0)) u();
  }

  /** The lost-node sweep (one replica does it, under a lease), then the watch deltas. */
  private async tick(): Promise<void> {
    if (this.ticking) return;
    this.ticking = true;
    const { store, cfg, replicaID } = this.ctx;
    const now = Date.now();
    const timeout = cfg.config.master.scheduler.heartbeat_timeout_ms;
    if (this.lastTickAt > 0 && now - this.lastTickAt > timeout / 2) this.blindAt = now;
    this.lastTickAt = now;
    try {
      await sweepLostNodes(store, cfg.config.master, now, replicaID, this.missingSince, this.blindAt);
      await this.configs.tick();
      if (await store.holdLease(ARCHIVE_LEASE, replicaID, 5000)) await store.archiveEvents();
      this.nodes.tick();
      this.lifecycle.tick();
      this.sandboxes.tick();
      await this.watchStream.tick();
    } catch (err) {
      if (isConnectionError(err)) this.blindAt = Date.now();
      this.ctx.log.warn({ err: toCubeError(err).message }, 'control tick failed');
    } finally {
      this.ticking = false;
    }
  }

  // --- the node feed (heartbeats.ts)

  /** Registers a node on its first heartbeat, records its metrics, and reconciles its sandboxes. */
  heartbeat(hb: Heartbeat): Promise<HeartbeatAnswer> {
    return this.feed.heartbeats([hb]);
  }

  heartbeats(hbs: Heartbeat[], settle = false): Promise<HeartbeatAnswer> {
    return this.feed.heartbeats(hbs, settle);
  }

  noteNodeTemplates(nodeID: string, templates: string[]): Promise<void> {
    return this.feed.noteNodeTemplates(nodeID, templates);
  }

  // --- sandboxes (sandboxes.ts)

  createSandbox(req: CreateSandboxRequest): Promise<SandboxRecord> {
    return this.sandboxes.createSandbox(req);
  }

  getSandbox(sandboxID: string): Promise<SandboxRecord> {
    return this.sandboxes.getSandbox(sandboxID);
  }

  listSandboxes(filter?: ListFilter): Promise<SandboxRecord[]> {
    return this.sandboxes.listSandboxes(filter);
  }

  destroySandbox(sandboxID: string, actor?: string, death?: ControlDeath): Promise<void> {
    return this.sandboxes.destroySandbox(sandboxID, actor, death);
  }

  deleteAccepted(sandboxID: string): Promise<{ owner?: string } | undefined> {
    return this.sandboxes.deleteAccepted(sandboxID);
  }

  pauseSandbox(sandboxID: string, actor?: string, opts?: PauseOptions): Promise<SandboxRecord> {
    return this.sandboxes.pauseSandbox(sandboxID, actor, opts);
  }

  resumeSandbox(sandboxID: string, timeoutSec?: number, actor?: string): Promise<{ sandbox: SandboxRecord; resumed: boolean }> {
    return this.sandboxes.resumeSandbox(sandboxID, timeoutSec, actor);
  }

  setTimeout(sandboxID: string, timeoutSec: number): Promise<SandboxRecord> {
    return this.sandboxes.setTimeout(sandboxID, timeoutSec);
  }

  setEgress(sandboxID: string, req: EgressRequest): Promise<SandboxRecord> {
    return this.sandboxes.setEgress(sandboxID, req);
  }

  nodeFor(sandboxID: string): Promise<NodeApi> {
    return this.sandboxes.nodeFor(sandboxID);
  }

  // --- nodes (nodes.ts)

  listNodes(): Promise<NodeView[]> {
    return this.nodes.listNodes();
  }

  nodeAction(a: NodeAction): Promise<NodeView> {
    return this.nodes.nodeAction(a);
  }

  templates(): Promise<{ templateID: string; nodes: string[] }[]> {
    return this.nodes.templates();
  }

  // --- config (config-authority.ts)

  config(): ConfigView {
    return this.configs.config();
  }

  reloadConfig(actor?: string): Promise<ReloadResult> {
    return this.configs.reloadConfig(actor);
  }

  setConfig(path: string, value: unknown, actor?: string): Promise<ReloadResult> {
    return this.configs.setConfig(path, value, actor);
  }

  // --- events and the watch stream (watch.ts)

  events(opts?: { sinceID?: number; beforeID?: number; limit?: number }): Promise<EventView[]> {
    return this.watchStream.events(opts);
  }

  snapshot(): Promise<Snapshot> {
    return this.watchStream.snapshot();
  }

  watch(listener: (m: WatchMessage) => void, opts?: { eventsOnly?: boolean }): () => void {
    return this.watchStream.watch(listener, opts);
  }
}
