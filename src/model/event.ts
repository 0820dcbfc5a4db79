// The event history: what happened to a sandbox, a node, the config or a pool, as the store keeps
// it and the watch stream carries it.
import { epochMs } from './time.js';

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
  /** Epoch ms. */
  at: number;
  kind: EventKind;
  nodeID?: string;
  sandboxID?: string;
  /** 1305xx code for failures. */
  code?: number;
  message: string;
  /** Milliseconds the operation took (creates, destroys, pauses). */
  durationMs?: number;
}

/**
 * An event read back from where a version before numeric times wrote it with an ISO 8601 time (a
 * store, an older node's notice or event stream): epoch ms. The same object when it is a number.
 */
export function eventWithEpochTime<T extends { at: number }>(e: T): T {
  const at = (e as { at: number | string }).at;
  return typeof at === 'number' ? e : { ...e, at: epochMs(at) };
}
