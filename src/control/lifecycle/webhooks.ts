// Webhook deliveries as E2B makes them: a POST of the event's JSON with e2b-webhook-id,
// e2b-delivery-id, e2b-signature-version v1 and e2b-signature (the unpadded base64url SHA-256 of
// the secret followed by the body). The queue is in the store (it outlives a replica's restart);
// any replica delivers what it claims (a claim keeps the others off it while it tries), beside the
// control's tick, never in it: a slow or dead receiver costs its deliveries' retries, nothing else.
import { createHash, randomUUID } from 'node:crypto';
import type { Logger } from 'pino';
import type { EventView } from '../../model/event.js';
import type { Delivery, LifecycleEvent, Webhook } from '../../model/lifecycle.js';
import type { LifecycleStore } from '../../store/lifecycle.js';

/** Deliveries queued at most; beyond, new ones are refused and counted (an event says so). */
export const MAX_QUEUED_DELIVERIES = 10_000;
/** Attempts before a delivery is given up: with the backoff below, about 13 minutes of trying. */
export const MAX_ATTEMPTS = 10;
/** A POST that has not answered in this long failed. */
const POST_TIMEOUT_MS = 10_000;
/** A replica's claim on a delivery: longer than a POST may take, so no two replicas send it at once. */
const CLAIM_MS = 30_000;
/** Deliveries claimed per run, and sent at once. */
const BATCH = 32;
const PARALLEL = 8;

/** E2B's signature: base64url without padding of SHA-256(secret + body). */
export function signature(secret: string, body: string): string {
  return createHash('sha256')
    .update(secret + body)
    .digest('base64url');
}

/** Seconds before attempt `attempts + 1`, after `attempts` failures: 1, 2, 4 ... 256, then 300. */
export function backoffMs(attempts: number): number {
  return Math.min(2 ** Math.max(0, attempts - 1), 300) * 1000;
}

/** The deliveries of `events` to the webhooks that want them (enabled, subscribed, the sandbox's owner's or everyone's). */
export function deliveriesOf(events: LifecycleEvent[], hooks: Webhook[], body: (e: LifecycleEvent) => string, now: number): Delivery[] {
  return events.flatMap((e) =>
    hooks
      .filter((w) => w.enabled && w.events.includes(e.type) && (w.owner === undefined || w.owner === e.owner))
      .map((w) => ({ id: randomUUID(), webhookID: w.id, eventID: e.id, body: body(e), attempts: 0, dueAt: now })),
  );
}

export interface DelivererOptions {
  store: LifecycleStore;
  log: Logger;
  appendEvent: (e: Omit<EventView, 'id' | 'at'> & { at?: number }) => Promise<void>;
}

export class Deliverer {
  private running?: Promise<void>;

  constructor(private readonly o: DelivererOptions) {}

  /** Starts a run unless one is going (the tick's part: not awaited). */
  tick(): void {
    this.running ??= this.run()
      .catch((err: unknown) => this.o.log.warn({ err }, 'webhook deliveries failed'))
      .finally(() => (this.running = undefined));
  }

  /** Delivers what is due; resolves when this run is done (tests, shutdown). */
  async run(): Promise<void> {
    const due = await this.o.store.claimDeliveries(Date.now(), BATCH, CLAIM_MS);
    if (due.length === 0) return;
    const hooks = new Map((await this.o.store.listWebhooks()).map((w) => [w.id, w]));
    for (let i = 0; i < due.length; i += PARALLEL) await Promise.all(due.slice(i, i + PARALLEL).map((d) => this.deliver(d, hooks.get(d.webhookID))));
  }

  private async deliver(d: Delivery, hook: Webhook | undefined): Promise<void> {
    // Deleted or turned off since it was queued: nothing to send.
    if (!hook?.enabled) return this.o.store.finishDelivery(d.id);
    const error = await post(hook, d).catch((e: unknown) => (e instanceof Error ? e.message : String(e)));
    if (error === undefined) return this.o.store.finishDelivery(d.id);
    const attempts = d.attempts + 1;
    if (attempts < MAX_ATTEMPTS) return this.o.store.retryDelivery({ ...d, attempts, dueAt: Date.now() + backoffMs(attempts), lastError: error });
    await this.o.store.finishDelivery(d.id);
    this.o.log.warn({ webhookID: hook.id, eventID: d.eventID, error }, 'webhook delivery given up');
    await this.o.appendEvent({
      kind: 'webhook.failed',
      message: `webhook ${hook.id} (${hook.name}, ${hook.url}): event ${d.eventID} not delivered after ${attempts} attempts: ${error}`,
    });
  }
}

/** Sends one delivery; undefined when the receiver took it (2xx), else why not. */
async function post(hook: Webhook, d: Delivery): Promise<string | undefined> {
  const res = await fetch(hook.url, {
    method: 'POST',
    body: d.body,
    redirect: 'manual',
    signal: AbortSignal.timeout(POST_TIMEOUT_MS),
    headers: {
      'content-type': 'application/json',
      'e2b-webhook-id': hook.id,
      'e2b-delivery-id': randomUUID(),
      'e2b-signature-version': 'v1',
      'e2b-signature': signature(hook.secret, d.body),
    },
  });
  await res.body?.cancel().catch(() => undefined); // only the status counts; a body that will not close goes with the socket
  return res.ok ? undefined : `HTTP ${res.status}`;
}
