// The watch stream: the snapshot a new watcher starts from, the listeners deltas are broadcast
// to, and the event history's writes (an event appended is an event watchers hear of). How the
// changes other writers made reach it is the node feed's (node-feed.ts): pushed as they happen
// (role all) or polled from the store each tick (a cluster).
import type { NodeEvent } from '../cubelet/types.js';
import type { NodeNotice } from '../cubelet/rpc-wire.js';
import type { ConfigView } from '../model/config.js';
import type { EventKind, EventView } from '../model/event.js';
import type { NodeView } from '../model/node.js';
import { publicView } from '../model/sandbox.js';
import type { Snapshot, StatsView, WatchMessage } from '../model/watch.js';
import type { StateStore } from '../store/types.js';
import type { ControlContext } from './context.js';
import { diff } from './deltas.js';
import type { FeedSink } from './node-feed.js';

/** Nodes as given; sandboxes (without secrets) and the last 100 events from the store. */
export async function snapshotOf(store: StateStore, nodes: NodeView[], config: ConfigView, stats: StatsView): Promise<Snapshot> {
  return { nodes, sandboxes: (await store.listSandboxes()).map(publicView), events: await store.listEvents({ limit: 100 }), config, stats };
}

export class Watchers {
  private readonly set = new Set<(m: WatchMessage) => void>();
  private readonly eventsOnly = new Set<(m: WatchMessage) => void>();

  get size(): number {
    return this.set.size;
  }

  /** Whether a watcher wants node, sandbox and stats deltas (not only events). */
  get wantState(): boolean {
    return this.set.size > this.eventsOnly.size;
  }

  /** Returns the unsubscribe function. `eventsOnly`: the listener reads events alone (the other deltas need not be worked out for it). */
  add(listener: (m: WatchMessage) => void, opts?: { eventsOnly?: boolean }): () => void {
    this.set.add(listener);
    if (opts?.eventsOnly) this.eventsOnly.add(listener);
    return () => {
      this.set.delete(listener);
      this.eventsOnly.delete(listener);
    };
  }

  broadcast(m: WatchMessage): void {
    for (const w of this.set) w(m);
  }
}

/** The state a watcher sees besides the store's: the nodes with their verdicts, the create stats. */
export interface WatchedState {
  listNodes(): Promise<NodeView[]>;
  stats(): StatsView;
  /** A node's notice, seen before it is appended (a sandbox.died keeps its tombstone first: deaths.ts). */
  noted?(e: Omit<EventView, 'id'>): Promise<void>;
}

export class WatchStream implements FeedSink {
  private readonly watchers = new Watchers();
  // What this replica last sent its watchers, to send only what changed.
  private readonly seen = { nodes: new Map<string, string>(), stats: '' };

  constructor(
    private readonly ctx: ControlContext,
    private readonly state: WatchedState,
  ) {}

  /** Starts the node feed's deliveries; returns what stops them. */
  start(): (() => void)[] {
    return this.ctx.feed.start(this);
  }

  events(opts?: { sinceID?: number; beforeID?: number; limit?: number }): Promise<EventView[]> {
    return this.ctx.store.listEvents(opts);
  }

  async snapshot(): Promise<Snapshot> {
    return snapshotOf(this.ctx.store, await this.state.listNodes(), this.ctx.cfg.view(), this.state.stats());
  }

  watch(listener: (m: WatchMessage) => void, opts?: { eventsOnly?: boolean }): () => void {
    return this.watchers.add(listener, opts);
  }

  broadcast(m: WatchMessage): void {
    this.watchers.broadcast(m);
  }

  /** The tick's part: the deltas since the last one, when anyone watches. */
  async tick(): Promise<void> {
    if (this.watchers.size > 0) await this.sendDeltas();
  }

  private async sendDeltas(): Promise<void> {
    const s = this.seen;
    // Every replica's metrics registry watches for events alone: listing and diffing every node
    // and sandbox each second for it was 17% of the control's CPU at 1000 nodes with no watcher else.
    if (!this.watchers.wantState) return this.ctx.feed.poll(false, this);
    diff(
      s.nodes,
      (await this.state.listNodes()).map((n) => [n.nodeID, n, JSON.stringify({ ...n, lastSeen: 0 })]),
      (node) => this.broadcast({ type: 'node', node }),
      (nodeID) => this.broadcast({ type: 'node.removed', nodeID }),
    );
    await this.ctx.feed.poll(true, this);
    const stats = this.state.stats();
    const sk = JSON.stringify(stats);
    if (sk !== s.stats) {
      s.stats = sk;
      this.broadcast({ type: 'stats', stats });
    }
  }

  async appendEvent(e: Omit<EventView, 'id' | 'at'> & { at?: number; kind: EventKind }): Promise<void> {
    const event = await this.ctx.store.appendEvent({ ...e, at: e.at ?? Date.now() });
    this.ctx.feed.appended(event, this);
  }

  /** A notice a heartbeat carried: once per sender and seq (older nodes number none: appended as it comes). */
  async appendNodeEvent({ seq, ...e }: NodeNotice, sender: string | undefined): Promise<void> {
    if (sender === undefined || seq === undefined) return this.appendEvent(e);
    const event = await this.ctx.store.appendNodeEvent(e, { sender, seq });
    if (event) this.ctx.feed.appended(event, this);
  }

  /** What a node reports as it happens (InProcessFeed) reaches the watchers (and its notices the history) at once. */
  nodeEvent(e: NodeEvent): void {
    if (e.type === 'sandbox') this.broadcast({ type: 'sandbox', sandbox: e.sandbox });
    else if (e.type === 'sandbox.removed') this.broadcast({ type: 'sandbox.removed', sandboxID: e.sandboxID });
    else {
      const event = e.event;
      void (this.state.noted?.(event) ?? Promise.resolve())
        .then(() => this.appendEvent(event))
        .catch((err: unknown) => this.ctx.log.error({ err }, 'could not record a node notice'));
    }
  }
}
