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

  get size(): number {
    return this.set.size;
  }

  /** Returns the unsubscribe function. */
  add(listener: (m: WatchMessage) => void): () => void {
    this.set.add(listener);
    return () => this.set.delete(listener);
  }

  broadcast(m: WatchMessage): void {
    for (const w of this.set) w(m);
  }
}
