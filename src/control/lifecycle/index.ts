// E2B's sandbox lifecycle events and webhooks (GET /events/sandboxes, /events/webhooks). One
// replica at a time (the `lifecycle` lease) derives the events from the event history, from a
// cursor kept in the store, and queues their deliveries; every replica delivers (webhooks.ts).
// Deriving again what a replica that died had derived adds nothing: the events' ids come from the
// history's, and a (webhook, event) is queued once.
import { randomUUID } from 'node:crypto';
import { CubeError } from '../../errors.js';
import { TOMBSTONE_KEEP_MS, type Tombstone } from '../../model/death.js';
import type { EventView } from '../../model/event.js';
import { LIFECYCLE_KEEP_MS, lifecycleWire, type LifecycleEvent, type LifecycleType, type Webhook } from '../../model/lifecycle.js';
import type { LifecycleQuery } from '../../store/lifecycle.js';
import type { ControlContext } from '../context.js';
import { deriveLifecycle, lifecycleTypeOf, type SandboxFacts } from './derive.js';
import { Deliverer, deliveriesOf, MAX_QUEUED_DELIVERIES } from './webhooks.js';

const LEASE = 'lifecycle';
const LEASE_MS = 10_000;
const CURSOR = 'lifecycle';
/** Events of the history derived per tick. */
const BATCH = 500;
const PRUNE_EVERY_MS = 60_000;

export interface WebhookRequest {
  name: string;
  url: string;
  enabled: boolean;
  events: LifecycleType[];
  signatureSecret: string;
}

/** What the API serves (ControlPlane.lifecycle). `owner`: the asking API key: its sandboxes' events, its webhooks. */
export interface LifecycleApi {
  events(q: LifecycleQuery): Promise<LifecycleEvent[]>;
  createWebhook(owner: string | undefined, req: WebhookRequest): Promise<Webhook>;
  webhooks(owner: string | undefined): Promise<Webhook[]>;
  webhook(owner: string | undefined, id: string): Promise<Webhook>;
  updateWebhook(owner: string | undefined, id: string, patch: Partial<WebhookRequest>): Promise<Webhook>;
  deleteWebhook(owner: string | undefined, id: string): Promise<void>;
}

export class Lifecycle implements LifecycleApi {
  private readonly deliverer: Deliverer;
  private deriving?: Promise<void>;
  private prunedAt = 0;

  constructor(
    private readonly ctx: ControlContext,
    private readonly appendEvent: (e: Omit<EventView, 'id' | 'at'> & { at?: number }) => Promise<void>,
  ) {
    this.deliverer = new Deliverer({ store: ctx.store.lifecycle, log: ctx.log, appendEvent });
  }

  /** The tick's part, beside it (not awaited): derive what is new, then deliver what is due. */
  tick(): void {
    this.deriving ??= this.derive()
      .catch((err: unknown) => this.ctx.log.warn({ err }, 'lifecycle events: derive failed'))
      .finally(() => (this.deriving = undefined));
    this.deliverer.tick();
  }

  /** Derives the events appended since the cursor (one replica at a time); resolves when done. */
  async derive(): Promise<void> {
    const { store, replicaID } = this.ctx;
    if (!(await store.holdLease(LEASE, replicaID, LEASE_MS))) return;
    const l = store.lifecycle;
    const now = Date.now();
    if (now - this.prunedAt > PRUNE_EVERY_MS) {
      await l.pruneLifecycle(now - TOMBSTONE_KEEP_MS, now - LIFECYCLE_KEEP_MS);
      this.prunedAt = now;
    }
    const history = await store.listEvents({ sinceID: (await l.getCursor(CURSOR)) ?? 0, limit: BATCH });
    if (history.length === 0) return;
    const derived: LifecycleEvent[] = [];
    for (const e of history) {
      const ev = await this.lifecycleOf(e, derived);
      if (ev) derived.push(ev);
    }
    await l.appendLifecycleEvents(derived);
    const hooks = await l.listWebhooks();
    const ds = deliveriesOf(derived, hooks, (e) => JSON.stringify(lifecycleWire(e)), now);
    const queued = await l.enqueueDeliveries(ds, MAX_QUEUED_DELIVERIES);
    if (queued < ds.length) {
      this.ctx.log.warn({ refused: ds.length - queued }, 'webhook queue full: deliveries refused');
      await this.appendEvent({
        kind: 'webhook.failed',
        message: `webhook queue full (${MAX_QUEUED_DELIVERIES} deliveries): ${ds.length - queued} delivery(ies) refused`,
      });
    }
    await l.setCursor(CURSOR, history[history.length - 1]!.id);
  }

  /** The lifecycle event of `e`, or undefined; `batch`: those derived before it in this run. */
  private async lifecycleOf(e: EventView, batch: LifecycleEvent[]): Promise<LifecycleEvent | undefined> {
    const type = lifecycleTypeOf(e);
    if (type === undefined) return undefined;
    const l = this.ctx.store.lifecycle;
    const id = e.sandboxID!;
    const tombstone = type === 'sandbox.lifecycle.killed' ? await l.getTombstone(id) : undefined;
    // A sandbox is killed once: its node's destroy after a death comes with the death's own event.
    if (e.kind === 'sandbox.destroyed' && tombstone) return undefined;
    if (type === 'sandbox.lifecycle.killed' && (batch.some((b) => b.sandboxID === id && b.type === type) || (await l.lastLifecycleEvent(id, [type]))))
      return undefined;
    return deriveLifecycle(e, await this.facts(id, batch, tombstone), tombstone);
  }

  /** What is known of the sandbox: its record, its tombstone, or its earlier events. */
  private async facts(sandboxID: string, batch: LifecycleEvent[], tombstone: Tombstone | undefined): Promise<SandboxFacts> {
    const rec = await this.ctx.store.getSandbox(sandboxID);
    if (rec) return { templateID: rec.templateID, metadata: rec.metadata, endAt: rec.endAt, ...(rec.owner !== undefined ? { owner: rec.owner } : {}) };
    const l = this.ctx.store.lifecycle;
    const ended = (tombstone ?? (await l.getTombstone(sandboxID))) || (await l.getEndedSandbox(sandboxID));
    if (ended?.templateID !== undefined)
      return {
        templateID: ended.templateID,
        ...(ended.metadata ? { metadata: ended.metadata } : {}),
        ...(ended.owner !== undefined ? { owner: ended.owner } : {}),
      };
    const before = [...batch].reverse().find((b) => b.sandboxID === sandboxID) ?? (await l.lastLifecycleEvent(sandboxID, ['sandbox.lifecycle.created']));
    if (!before) return { templateID: '' };
    const meta = before.data?.sandbox_metadata as Record<string, string> | undefined;
    return { templateID: before.templateID, ...(meta ? { metadata: meta } : {}), ...(before.owner !== undefined ? { owner: before.owner } : {}) };
  }

  /** Delivers what is due now (tests). */
  deliverNow(): Promise<void> {
    return this.deliverer.run();
  }

  events(q: LifecycleQuery): Promise<LifecycleEvent[]> {
    return this.ctx.store.lifecycle.listLifecycleEvents(q);
  }

  async createWebhook(owner: string | undefined, req: WebhookRequest): Promise<Webhook> {
    const w: Webhook = {
      id: randomUUID(),
      ...(owner !== undefined ? { owner } : {}),
      name: req.name,
      url: req.url,
      enabled: req.enabled,
      events: req.events,
      secret: req.signatureSecret,
      createdAt: Date.now(),
    };
    await this.ctx.store.lifecycle.putWebhook(w);
    return w;
  }

  async webhooks(owner: string | undefined): Promise<Webhook[]> {
    return (await this.ctx.store.lifecycle.listWebhooks()).filter((w) => w.owner === owner);
  }

  async webhook(owner: string | undefined, id: string): Promise<Webhook> {
    const w = await this.ctx.store.lifecycle.getWebhook(id);
    if (!w || w.owner !== owner) throw new CubeError('NOT_FOUND', `webhook ${id} not found`);
    return w;
  }

  async updateWebhook(owner: string | undefined, id: string, patch: Partial<WebhookRequest>): Promise<Webhook> {
    const { signatureSecret, ...rest } = patch;
    const w: Webhook = { ...(await this.webhook(owner, id)), ...rest, ...(signatureSecret !== undefined ? { secret: signatureSecret } : {}) };
    await this.ctx.store.lifecycle.putWebhook(w);
    return w;
  }

  async deleteWebhook(owner: string | undefined, id: string): Promise<void> {
    await this.webhook(owner, id);
    await this.ctx.store.lifecycle.deleteWebhook(id);
  }
}
