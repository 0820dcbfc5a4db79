// E2B lifecycle events from the event history (pure): which of our events is which E2B event, and
// its id, the same however often it is derived (a replica that died mid-way and the one after it
// derive the same ids, and the store keeps each once).
import { createHash } from 'node:crypto';
import { DEATH_MEANING, type Tombstone } from '../../model/death.js';
import type { EventView } from '../../model/event.js';
import type { LifecycleEvent, LifecycleType } from '../../model/lifecycle.js';
import { isoTime } from '../../model/time.js';

/** What is known of the sandbox an event is about (its record, tombstone or earlier events). */
export interface SandboxFacts {
  templateID: string;
  metadata?: Record<string, string>;
  owner?: string;
  /** Epoch ms: when it ends now (an updated event's set_timeout). */
  endAt?: number;
}

const TYPE_OF: Partial<Record<EventView['kind'], LifecycleType>> = {
  'sandbox.created': 'sandbox.lifecycle.created',
  'sandbox.paused': 'sandbox.lifecycle.paused',
  'sandbox.resumed': 'sandbox.lifecycle.resumed',
  'sandbox.updated': 'sandbox.lifecycle.updated',
  'sandbox.snapshot': 'sandbox.lifecycle.checkpointed',
  'sandbox.destroyed': 'sandbox.lifecycle.killed',
  'sandbox.died': 'sandbox.lifecycle.killed',
};

/** The E2B type an event of the history becomes, if any. */
export function lifecycleTypeOf(e: Pick<EventView, 'kind' | 'sandboxID'>): LifecycleType | undefined {
  return e.sandboxID === undefined ? undefined : TYPE_OF[e.kind];
}

/** A UUID (v4 layout) from the event's id: stable across replicas and retries. */
export function lifecycleID(eventID: number): string {
  const h = createHash('sha256').update(`cube-lifecycle:${eventID}`).digest('hex');
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-4${h.slice(13, 16)}-${((parseInt(h[16]!, 16) & 3) | 8).toString(16)}${h.slice(17, 20)}-${h.slice(20, 32)}`;
}

/**
 * The lifecycle event of `e` (lifecycleTypeOf(e) must be defined). A killed event carries the
 * reason E2B calls kill_reason: `request` when its client (or anyone through the E2B API) killed
 * it, else the death's reason, with our code and message beside it. `tombstone`: the sandbox's,
 * for a kill (sandbox.died carries its own reason).
 */
export function deriveLifecycle(e: EventView, facts: SandboxFacts, tombstone?: Tombstone): LifecycleEvent {
  const type = lifecycleTypeOf(e)!;
  const data: Record<string, unknown> = {};
  if (facts.metadata && Object.keys(facts.metadata).length > 0) data.sandbox_metadata = facts.metadata;
  if (type === 'sandbox.lifecycle.killed') {
    const death =
      e.kind === 'sandbox.died' && e.death !== undefined
        ? { reason: e.death, code: e.code, message: e.message }
        : tombstone
          ? { reason: tombstone.reason, code: tombstone.cubeCode, message: tombstone.message }
          : undefined;
    if (death) Object.assign(data, { kill_reason: death.reason, cube_code: death.code, message: `${DEATH_MEANING[death.reason]}: ${death.message}` });
    else data.kill_reason = 'request';
  }
  if (type === 'sandbox.lifecycle.updated' && facts.endAt !== undefined) data.set_timeout = isoTime(facts.endAt);
  return {
    id: lifecycleID(e.id),
    type,
    at: e.at,
    sandboxID: e.sandboxID!,
    templateID: facts.templateID,
    ...(facts.owner !== undefined ? { owner: facts.owner } : {}),
    data: Object.keys(data).length > 0 ? data : null,
  };
}
