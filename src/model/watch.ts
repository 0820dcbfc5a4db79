// What the control plane's watch carries (GET /admin/v1/watch): a snapshot of everything, then
// deltas; and the rates it keeps (StatsView). `W` is how each kind of record is written: the model's
// types here (epoch ms times), the admin API's wire types (ISO 8601 times) on the wire.
import type { ConfigChange, ConfigView } from './config.js';
import type { EventView } from './event.js';
import type { NodeView } from './node.js';
import type { SandboxView } from './sandbox.js';

export interface StatsView {
  /** Creates in the last 60 s. */
  createsLastMinute: number;
  createRatePerSec: number;
  createP99Ms: number;
  createP50Ms: number;
  /** Placement decisions (the scheduler pipeline over every node's view) in the last 60 s; absent where no decision was timed. */
  decisionsLastMinute?: number;
  decisionP50Ms?: number;
  decisionP99Ms?: number;
  /** Creates and resumes refused in the last 60 s, by code and by the rule that refused (a filter name, 'pool', 'release_ratio'). */
  refusedLastMinute?: { code: number; rule: string; count: number }[];
  /** The same counted since this process started (cubed_refused_total on /metrics). */
  refusedSinceStart?: { code: number; rule: string; count: number }[];
}

/** The record types a snapshot and the watch carry. */
export interface Shapes {
  sandbox: unknown;
  node: unknown;
  event: unknown;
}

export interface ModelShapes extends Shapes {
  sandbox: SandboxView;
  node: NodeView;
  event: EventView;
}

export interface Snapshot<W extends Shapes = ModelShapes> {
  nodes: W['node'][];
  sandboxes: W['sandbox'][];
  events: W['event'][];
  config: ConfigView;
  stats: StatsView;
}

/** One message of GET /admin/v1/watch (server-sent events; `event:` is the type). */
export type WatchMessage<W extends Shapes = ModelShapes> =
  | { type: 'snapshot'; snapshot: Snapshot<W> }
  | { type: 'node'; node: W['node'] }
  | { type: 'node.removed'; nodeID: string }
  | { type: 'sandbox'; sandbox: W['sandbox'] }
  | { type: 'sandbox.removed'; sandboxID: string }
  | { type: 'event'; event: W['event'] }
  | { type: 'config'; config: ConfigView; changes: ConfigChange[] }
  | { type: 'stats'; stats: StatsView };
