// The event history: what happened to a sandbox, a node, the config or a pool, as the store keeps
// it and the watch stream carries it.

export type EventKind =
  | 'sandbox.created'
  | 'sandbox.destroyed'
  | 'sandbox.paused'
  | 'sandbox.resumed'
  | 'sandbox.error'
  | 'sandbox.oom'
  | 'sandbox.timeout'
  | 'sandbox.network'
  | 'sandbox.snapshot'
  | 'schedule.failed'
  | 'config.reloaded'
  | 'config.rejected'
  | 'node.cordoned'
  | 'node.uncordoned'
  | 'node.draining'
  | 'node.lost'
  | 'node.joined'
  | 'node.deleted'
  | 'pool.exhausted'
  | 'template.fetch';

export interface EventView {
  id: number;
  /** ISO 8601. */
  at: string;
  kind: EventKind;
  nodeID?: string;
  sandboxID?: string;
  /** 1305xx code for failures. */
  code?: number;
  message: string;
  /** Milliseconds the operation took (creates, destroys, pauses). */
  durationMs?: number;
}
