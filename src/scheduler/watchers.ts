// The watch stream's two halves every ControlPlane serves alike: the snapshot a new watcher
// starts from, and the set of listeners deltas are broadcast to.
import type { ConfigView } from '../model/config.js';
import type { NodeView } from '../model/node.js';
import { publicView } from '../model/sandbox.js';
import type { Snapshot, StatsView, WatchMessage } from '../model/watch.js';
import type { StateStore } from '../store/types.js';

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
