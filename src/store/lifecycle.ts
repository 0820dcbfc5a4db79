// The store's lifecycle facet (StateStore.lifecycle): tombstones of sandboxes that died, E2B's
// lifecycle events, webhooks and their delivery queue, and the cursor of the replica deriving the
// events. Durable in both backends (SQLite; MySQL in a cluster: Redis keeps nothing on disk, and
// a tombstone or a queued delivery must outlive a Redis restart). Tested by test/store/contract.ts.
import type { Tombstone } from '../model/death.js';
import type { Delivery, LifecycleEvent, LifecycleType, Webhook } from '../model/lifecycle.js';

export interface EndedSandbox {
  sandboxID: string;
  /** Epoch ms. */
  at: number;
  templateID: string;
  metadata: Record<string, string>;
  owner?: string;
}

export interface LifecycleQuery {
  sandboxID?: string;
  /** Only the sandboxes this API key created (absent: all). */
  owner?: string;
  types?: LifecycleType[];
  offset: number;
  limit: number;
  orderAsc: boolean;
}

export interface LifecycleStore {
  /**
   * Keeps the tombstone unless the sandbox has one already: the first reason given wins, except
   * that a typed reason replaces `vanished` (what is left when none was given). True when written.
   */
  putTombstone(t: Tombstone): Promise<boolean>;
  getTombstone(sandboxID: string): Promise<Tombstone | undefined>;
  /**
   * What a sandbox deleted by its client was (template, metadata, owner), kept as long as the
   * lifecycle events: its events may be derived after its record went. Pruned with them.
   */
  putEndedSandbox(s: EndedSandbox): Promise<void>;
  getEndedSandbox(sandboxID: string): Promise<EndedSandbox | undefined>;

  /** Appends the events whose id is not there yet (deriving them twice adds nothing). */
  appendLifecycleEvents(events: LifecycleEvent[]): Promise<void>;
  /** By time, then by the order they were appended. */
  listLifecycleEvents(q: LifecycleQuery): Promise<LifecycleEvent[]>;
  /** The latest event of the sandbox of one of `types` (e.g. its created event, for the sandbox's template and metadata). */
  lastLifecycleEvent(sandboxID: string, types: LifecycleType[]): Promise<LifecycleEvent | undefined>;

  putWebhook(w: Webhook): Promise<void>;
  getWebhook(id: string): Promise<Webhook | undefined>;
  listWebhooks(): Promise<Webhook[]>;
  deleteWebhook(id: string): Promise<boolean>;

  /**
   * Queues deliveries, one per (webhook, event) however often it is asked, while fewer than `max`
   * are queued; returns how many were queued (the others were refused: the queue is full).
   */
  enqueueDeliveries(ds: Delivery[], max: number): Promise<number>;
  /**
   * Takes up to `limit` deliveries due at `now` that nobody holds, for `claimMs`: until then no
   * other replica takes them (a replica that dies mid-delivery leaves them to the next after that).
   */
  claimDeliveries(now: number, limit: number, claimMs: number): Promise<Delivery[]>;
  /** Delivered, or given up: removed from the queue. */
  finishDelivery(id: string): Promise<void>;
  /** Failed: tried again at `d.dueAt` (its attempts and last error as given). */
  retryDelivery(d: Delivery): Promise<void>;
  queuedDeliveries(): Promise<number>;

  /** A named position (the event id the lifecycle events were derived up to). */
  getCursor(name: string): Promise<number | undefined>;
  setCursor(name: string, value: number): Promise<void>;

  /** Drops tombstones older than `tombstonesBefore`, lifecycle events and ended sandboxes older than `eventsBefore` (epoch ms). */
  pruneLifecycle(tombstonesBefore: number, eventsBefore: number): Promise<void>;
}

/** The WHERE clause of a lifecycle query (both backends' SQL), with its arguments. */
export function lifecycleWhere(q: LifecycleQuery): { where: string; args: unknown[] } {
  const parts: [string, unknown[]][] = [];
  if (q.sandboxID !== undefined) parts.push(['sandbox_id = ?', [q.sandboxID]]);
  if (q.owner !== undefined) parts.push(['owner = ?', [q.owner]]);
  if (q.types && q.types.length > 0) parts.push([`type IN (${q.types.map(() => '?').join(', ')})`, q.types]);
  return { where: parts.length ? ` WHERE ${parts.map(([p]) => p).join(' AND ')}` : '', args: parts.flatMap(([, a]) => a) };
}

/** Webhooks oldest first (then by id). */
export function byAge(ws: Webhook[]): Webhook[] {
  return ws.sort((a, b) => a.createdAt - b.createdAt || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
}
