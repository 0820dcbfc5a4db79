// What the control plane's watch carries (GET /admin/v1/watch): a snapshot of everything, then
// deltas; and the rates it keeps (StatsView). `S` is how a sandbox is written: the model's view here,
// the admin API's wire view (ISO 8601 times) on the wire.
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

export interface Snapshot<S = SandboxView> {
  nodes: NodeView[];
  sandboxes: S[];
  events: EventView[];
  config: ConfigView;
  stats: StatsView;
}

/** One message of GET /admin/v1/watch (server-sent events; `event:` is the type). */
export type WatchMessage<S = SandboxView> =
  | { type: 'snapshot'; snapshot: Snapshot<S> }
  | { type: 'node'; node: NodeView }
  | { type: 'node.removed'; nodeID: string }
  | { type: 'sandbox'; sandbox: S }
  | { type: 'sandbox.removed'; sandboxID: string }
  | { type: 'event'; event: EventView }
  | { type: 'config'; config: ConfigView; changes: ConfigChange[] }
  | { type: 'stats'; stats: StatsView };
