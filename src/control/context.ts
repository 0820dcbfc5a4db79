// What every part of the control plane works over (service.ts wires the parts, each a file per
// job: heartbeats.ts, sandboxes.ts, nodes.ts, config-authority.ts, watch.ts, locks.ts).
import type { Logger } from 'pino';
import type { ConfigStore } from '../config/store.js';
import type { StateStore } from '../store/types.js';
import type { NodeDirectory } from './node-directory.js';
import type { NodeFeed } from './node-feed.js';

export interface ControlContext {
  readonly store: StateStore;
  readonly cfg: ConfigStore;
  readonly log: Logger;
  /** This replica's name (leases, logs, events). */
  readonly replicaID: string;
  /** Where the nodes are: remote (node RPC) or in this process (role all). */
  readonly nodes: NodeDirectory;
  /** How this replica learns the nodes' views and what other writers changed (in-process or from the store). */
  readonly feed: NodeFeed;
}
