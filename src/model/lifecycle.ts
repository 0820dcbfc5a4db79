// E2B's sandbox lifecycle events (GET /events/sandboxes, webhooks): what happened to a sandbox,
// in E2B's types, kept 7 days; and the webhooks they are delivered to. Built from the event
// history by the control plane (src/control/lifecycle/), one replica at a time.

export const LIFECYCLE_TYPES = [
  'sandbox.lifecycle.created',
  'sandbox.lifecycle.killed',
  'sandbox.lifecycle.updated',
  'sandbox.lifecycle.paused',
  'sandbox.lifecycle.resumed',
  'sandbox.lifecycle.checkpointed',
] as const;

export type LifecycleType = (typeof LIFECYCLE_TYPES)[number];

/** E2B's retention of lifecycle events. */
export const LIFECYCLE_KEEP_MS = 7 * 24 * 3600_000;

export interface LifecycleEvent {
  /** A UUID, the same however often the event is derived (from the event history's id). */
  id: string;
  type: LifecycleType;
  /** Epoch ms. */
  at: number;
  sandboxID: string;
  templateID: string;
  /** The API key (id) that created the sandbox: whose events these are. */
  owner?: string;
  /** E2B's eventData: sandbox_metadata, kill_reason (and our cube_code, message), set_timeout... */
  data: Record<string, unknown> | null;
}

export interface Webhook {
  id: string;
  /** The API key (id) that registered it: it is sent the events of that key's sandboxes. */
  owner?: string;
  name: string;
  url: string;
  enabled: boolean;
  events: LifecycleType[];
  /** Signs each delivery (e2b-signature); never answered back. */
  secret: string;
  /** Epoch ms. */
  createdAt: number;
}

/** One event to one webhook, until it is delivered or given up. */
export interface Delivery {
  /** A UUID (e2b-delivery-id). */
  id: string;
  webhookID: string;
  eventID: string;
  /** The JSON body, as signed. */
  body: string;
  attempts: number;
  /** Epoch ms of the next attempt. */
  dueAt: number;
  lastError?: string;
}

export function isLifecycleType(v: unknown): v is LifecycleType {
  return typeof v === 'string' && (LIFECYCLE_TYPES as readonly string[]).includes(v);
}

/** E2B's JSON of a lifecycle event (GET /events/sandboxes, webhook payloads). */
export function lifecycleWire(e: LifecycleEvent): Record<string, unknown> {
  return {
    version: 'v1',
    id: e.id,
    type: e.type,
    eventData: e.data,
    // One build per template here, and one execution per sandbox.
    sandboxBuildId: e.templateID,
    sandboxExecutionId: e.sandboxID,
    sandboxId: e.sandboxID,
    sandboxTeamId: e.owner ?? null,
    sandboxTemplateId: e.templateID,
    timestamp: new Date(e.at).toISOString(),
  };
}
