// How this replica learns what it did not do itself: the nodes' views (placement and operators
// read them), the templates they hold, and the changes other writers made (for the watch
// stream). The one difference between role all and a cluster, chosen at wiring (wiring.ts):
// - InProcessFeed (role all, a cluster of one): the nodes are in this process. Their views are
//   asked for when needed, and what they and this replica do reaches the watchers as it happens.
// - StoreFeed (role control): nodes heartbeat their views into the store (heartbeats.ts), and
//   other replicas write there too: read from it, and the watch deltas polled and diffed each tick.
// Everything else in the control plane is the same code for both.
import { answeredAt } from '../cubelet/remote.js';
import type { NodeApi, NodeEvent } from '../cubelet/types.js';
import type { EventView } from '../model/event.js';
import type { NodeView } from '../model/node.js';
import { stamp } from '../model/time.js';
import { publicView, type SandboxView } from '../model/sandbox.js';
import type { WatchMessage } from '../model/watch.js';
import type { StateStore } from '../store/types.js';
import { diff } from './deltas.js';

/** Where a feed delivers: the watch stream (watch.ts). */
export interface FeedSink {
  broadcast(m: WatchMessage): void;
  /** What a node reported (a sandbox changed or went, a notice for the history). */
  nodeEvent(e: NodeEvent): void;
}

export interface NodeFeed {
  /** Starts delivering what the nodes report as it happens, if the feed can; returns what stops it. */
  start(sink: FeedSink): (() => void)[];
  /** The nodes' latest views by node id (those it has; `ids` are the registry's). */
  views(ids: string[]): Promise<Map<string, NodeView>>;
  /** The templates, each with the nodes holding it, by template id. */
  templates(): Promise<{ templateID: string; nodes: string[] }[]>;
  /** An event this replica appended to the history: told to the watchers now, or found by the next poll. */
  appended(event: EventView, sink: FeedSink): void;
  /** Each tick: what other writers changed since the last poll, told to the watchers; `wantState`: sandboxes too, not only events. */
  poll(wantState: boolean, sink: FeedSink): Promise<void>;
  /** When the node answered with `view` (SandboxRecord.nodeAt), if known. */
  answeredAt(view: SandboxView): number | undefined;
  /**
   * From when a create just sent to a node shows in the views this feed gives: at once (views
   * taken on demand), or not before the node's answer (Infinity: a heartbeat cannot tell).
   */
  sentAt(): number;
  /**
   * For a destroy about to be sent to a node: a time in the node's clock before which its views
   * surely still count the sandbox (they are subtracted its resources until a newer one comes);
   * undefined when the feed cannot tell (its views are then taken as they come).
   */
  destroySentAt(): number | undefined;
  /** Why node `nodeID` cannot leave the registry (it is this process's own), if it cannot. */
  keeps(nodeID: string): string | undefined;
}

/** Role all: the nodes of this process, asked for their views, pushing what they report. */
export class InProcessFeed implements NodeFeed {
  constructor(private readonly nodes: readonly NodeApi[]) {}

  start(sink: FeedSink): (() => void)[] {
    return this.nodes.map((n) => n.subscribe((e) => sink.nodeEvent(e)));
  }

  /** The views as they are now (what the nodes' next heartbeat would say). */
  async views(): Promise<Map<string, NodeView>> {
    return new Map(await Promise.all(this.nodes.map(async (n) => [n.nodeID, await n.nodeView()] as const)));
  }

  /**
   * From the nodes as they are now, so a client's own import, build, tag or rm shows in its next
   * list (the registry is written from heartbeats, up to an interval later: the list right after
   * an import missed it under load).
   */
  async templates(): Promise<{ templateID: string; nodes: string[] }[]> {
    const by = new Map<string, string[]>();
    for (const v of (await this.views()).values()) for (const t of v.templates) by.set(t, [...(by.get(t) ?? []), v.nodeID]);
    return [...by].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)).map(([templateID, nodes]) => ({ templateID, nodes }));
  }

  appended(event: EventView, sink: FeedSink): void {
    sink.broadcast({ type: 'event', event });
  }

  /** Nothing to poll: this replica is the only writer, and what it and its nodes did went out as it happened. */
  async poll(): Promise<void> {}

  /** The nodes share this process's clock: read now the answer is in. */
  answeredAt(view: SandboxView): number {
    return answeredAt(view) ?? Date.now();
  }

  /**
   * An in-process node registers the sandbox before its first await, and its views are taken on
   * demand: from the call on, any view newer than now counts it. Left at Infinity, the placement
   * was counted on top of the creating sandbox for the whole create: 20 concurrent creates on a
   * 25.6-cpu node refused the 20th (26+1 > 25.6). The node stamps its views with the same strict
   * clock (model/time.ts stamp): a view and a call of the same millisecond are still ordered.
   */
  sentAt(): number {
    return stamp();
  }

  /**
   * Views are taken on demand in this process's strict clock, and the node stops counting the
   * sandbox when the call reaches it: one stamped before this counted it, one after did not.
   */
  destroySentAt(): number {
    return stamp();
  }

  keeps(nodeID: string): string | undefined {
    // Its next heartbeat would register it again at once.
    return this.nodes.some((n) => n.nodeID === nodeID)
      ? `node ${nodeID} is this daemon's own node (role all) and cannot be deleted; stop the daemon instead`
      : undefined;
  }
}

/** Role control: the nodes' heartbeats and the other replicas' writes, read from the store. */
export class StoreFeed implements NodeFeed {
  // What this replica last sent its watchers, to send only what changed.
  private readonly seen = { eventID: -1, sandboxes: new Map<string, string>() };

  constructor(private readonly store: StateStore) {}

  start(): (() => void)[] {
    return [];
  }

  views(ids: string[]): Promise<Map<string, NodeView>> {
    return this.store.getNodeMetrics(ids);
  }

  templates(): Promise<{ templateID: string; nodes: string[] }[]> {
    return this.store.listTemplates();
  }

  /** Found by the next poll, with every other replica's. */
  appended(): void {}

  /** Events, and with `wantState` sandbox changes, that any replica or node made, from the store. */
  async poll(wantState: boolean, sink: FeedSink): Promise<void> {
    const s = this.seen;
    if (s.eventID < 0) s.eventID = (await this.store.listEvents({ limit: 1 }))[0]?.id ?? 0;
    for (const event of await this.store.listEvents({ sinceID: s.eventID, limit: 1000 })) {
      s.eventID = event.id;
      sink.broadcast({ type: 'event', event });
    }
    if (!wantState) return;
    diff(
      s.sandboxes,
      (await this.store.listSandboxes()).map((r) => {
        const v = publicView(r);
        return [v.sandboxID, v, JSON.stringify(v)];
      }),
      (sandbox) => sink.broadcast({ type: 'sandbox', sandbox }),
      (sandboxID) => sink.broadcast({ type: 'sandbox.removed', sandboxID }),
    );
  }

  /** Remote nodes stamp their answers (node RPC). */
  answeredAt(view: SandboxView): number | undefined {
    return answeredAt(view);
  }

  sentAt(): number {
    return Infinity;
  }

  /** A heartbeat's stamp is the node's clock, not ours: the next one shows the sandbox gone. */
  destroySentAt(): undefined {
    return undefined;
  }

  keeps(): undefined {
    return undefined;
  }
}
