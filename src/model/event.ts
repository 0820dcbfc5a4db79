// The event history: what happened to a sandbox, a node, the config or a pool, as the store keeps
// it and the watch stream carries it.
import type { DeathReason } from './death.js';
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
  /** It ended without its client asking: `death` says why (src/model/death.ts), `code` is the reason's 1304xx. */
  | 'sandbox.died'
  /** Its timeout was set (E2B setTimeout, connect with a timeout). */
  | 'sandbox.updated'
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
  | 'template.fetch'
  /** A webhook delivery was given up after its retries (src/control/lifecycle/webhooks.ts). */
  | 'webhook.failed';

/**
 * Kinds a sandbox or a client can produce at will and in any number (an allocation loop OOM-killed
 * again and again, setTimeout or egress calls, creates refused, a webhook endpoint that keeps
 * failing). The history keeps them within a budget of their own, beside the one of every other
 * kind (creates, pauses, deaths, nodes, config): a flood of them pushes out older ones of theirs,
 * never the lifecycle (before, OOM events could push the whole history out).
 */
const FLOOD_KINDS: ReadonlySet<EventKind> = new Set<EventKind>([
  'sandbox.oom',
  'sandbox.updated',
  'sandbox.network',
  'schedule.failed',
  'pool.exhausted',
  'template.fetch',
  'webhook.failed',
]);

/** Whether `kind` is kept within the flood budget (FLOOD_KINDS) (pure). */
export function isFloodKind(kind: EventKind): boolean {
  return FLOOD_KINDS.has(kind);
}

/** `events` (oldest first) without all but the newest `keep` of each class, lifecycle and flood (pure). */
export function newestOfEachClass<T extends { kind: EventKind }>(events: readonly T[], keep: number): T[] {
  const left = { flood: keep, lifecycle: keep };
  const out: T[] = [];
  for (let i = events.length - 1; i >= 0; i--) {
    const c = isFloodKind(events[i]!.kind) ? 'flood' : 'lifecycle';
    if (left[c]-- > 0) out.push(events[i]!);
  }
  return out.reverse();
}

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
  /** sandbox.died: why. */
  death?: DeathReason;
}

/**
 * An event read back from where a version before numeric times wrote it with an ISO 8601 time (a
 * store, an older node's notice or event stream): epoch ms. The same object when it is a number.
 */
export function eventWithEpochTime<T extends { at: number }>(e: T): T {
  const at = (e as { at: number | string }).at;
  return typeof at === 'number' ? e : { ...e, at: epochMs(at) };
}
