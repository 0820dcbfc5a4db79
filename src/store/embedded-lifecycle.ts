// The lifecycle facet of the embedded store (src/store/lifecycle.ts) on its SQLite file; its
// tables are made by the embedded store's migrations (LIFECYCLE_MIGRATION).
import type Database from 'better-sqlite3';
import type { Tombstone } from '../model/death.js';
import type { Delivery, LifecycleEvent, LifecycleType, Webhook } from '../model/lifecycle.js';
import { byAge, lifecycleWhere, type EndedSandbox, type LifecycleQuery, type LifecycleStore } from './lifecycle.js';

export const LIFECYCLE_MIGRATION = `CREATE TABLE tombstones (id TEXT PRIMARY KEY, at INTEGER NOT NULL, reason TEXT NOT NULL, body TEXT NOT NULL);
   CREATE INDEX tombstones_at ON tombstones(at);
   CREATE TABLE lifecycle_events (seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL UNIQUE, sandbox_id TEXT NOT NULL, type TEXT NOT NULL, owner TEXT, at INTEGER NOT NULL, body TEXT NOT NULL);
   CREATE INDEX lifecycle_by_sandbox ON lifecycle_events(sandbox_id, at);
   CREATE INDEX lifecycle_by_at ON lifecycle_events(at);
   CREATE TABLE webhooks (id TEXT PRIMARY KEY, body TEXT NOT NULL);
   CREATE TABLE webhook_deliveries (id TEXT PRIMARY KEY, webhook_id TEXT NOT NULL, event_id TEXT NOT NULL, due_at INTEGER NOT NULL, claim_until INTEGER NOT NULL DEFAULT 0, body TEXT NOT NULL, UNIQUE (webhook_id, event_id));
   CREATE INDEX deliveries_due ON webhook_deliveries(due_at);
   CREATE TABLE cursors (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
   CREATE TABLE ended_sandboxes (id TEXT PRIMARY KEY, at INTEGER NOT NULL, body TEXT NOT NULL);`;

type Row = { body: string };

export class EmbeddedLifecycle implements LifecycleStore {
  /** `q`: the embedded store's statement cache; `db`: its open database (for transactions). */
  constructor(
    private readonly q: (sql: string) => Database.Statement,
    private readonly db: () => Database.Database,
  ) {}

  async putTombstone(t: Tombstone): Promise<boolean> {
    const onConflict =
      t.reason === 'vanished' ? 'DO NOTHING' : `DO UPDATE SET at = excluded.at, reason = excluded.reason, body = excluded.body WHERE reason = 'vanished'`;
    return (
      this.q(`INSERT INTO tombstones (id, at, reason, body) VALUES (?, ?, ?, ?) ON CONFLICT(id) ${onConflict}`).run(
        t.sandboxID,
        t.at,
        t.reason,
        JSON.stringify(t),
      ).changes > 0
    );
  }

  async getTombstone(sandboxID: string): Promise<Tombstone | undefined> {
    const row = this.q('SELECT body FROM tombstones WHERE id = ?').get(sandboxID) as Row | undefined;
    return row ? (JSON.parse(row.body) as Tombstone) : undefined;
  }

  async putEndedSandbox(s: EndedSandbox): Promise<void> {
    this.q('INSERT OR REPLACE INTO ended_sandboxes (id, at, body) VALUES (?, ?, ?)').run(s.sandboxID, s.at, JSON.stringify(s));
  }

  async getEndedSandbox(sandboxID: string): Promise<EndedSandbox | undefined> {
    const row = this.q('SELECT body FROM ended_sandboxes WHERE id = ?').get(sandboxID) as Row | undefined;
    return row ? (JSON.parse(row.body) as EndedSandbox) : undefined;
  }

  async appendLifecycleEvents(events: LifecycleEvent[]): Promise<void> {
    const ins = this.q('INSERT INTO lifecycle_events (id, sandbox_id, type, owner, at, body) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT(id) DO NOTHING');
    this.db().transaction(() => {
      for (const e of events) ins.run(e.id, e.sandboxID, e.type, e.owner ?? null, e.at, JSON.stringify(e));
    })();
  }

  async listLifecycleEvents(q: LifecycleQuery): Promise<LifecycleEvent[]> {
    const { where, args } = lifecycleWhere(q);
    const dir = q.orderAsc ? 'ASC' : 'DESC';
    const sql = `SELECT body FROM lifecycle_events${where} ORDER BY at ${dir}, seq ${dir} LIMIT ? OFFSET ?`;
    return (this.q(sql).all(...args, q.limit, q.offset) as Row[]).map((r) => JSON.parse(r.body) as LifecycleEvent);
  }

  async lastLifecycleEvent(sandboxID: string, types: LifecycleType[]): Promise<LifecycleEvent | undefined> {
    return (await this.listLifecycleEvents({ sandboxID, types, offset: 0, limit: 1, orderAsc: false }))[0];
  }

  async putWebhook(w: Webhook): Promise<void> {
    this.q('INSERT OR REPLACE INTO webhooks (id, body) VALUES (?, ?)').run(w.id, JSON.stringify(w));
  }

  async getWebhook(id: string): Promise<Webhook | undefined> {
    const row = this.q('SELECT body FROM webhooks WHERE id = ?').get(id) as Row | undefined;
    return row ? (JSON.parse(row.body) as Webhook) : undefined;
  }

  async listWebhooks(): Promise<Webhook[]> {
    return byAge((this.q('SELECT body FROM webhooks').all() as Row[]).map((r) => JSON.parse(r.body) as Webhook));
  }

  async deleteWebhook(id: string): Promise<boolean> {
    return this.db().transaction(() => {
      this.q('DELETE FROM webhook_deliveries WHERE webhook_id = ?').run(id);
      return this.q('DELETE FROM webhooks WHERE id = ?').run(id).changes > 0;
    })();
  }

  async enqueueDeliveries(ds: Delivery[], max: number): Promise<number> {
    const ins = this.q('INSERT INTO webhook_deliveries (id, webhook_id, event_id, due_at, body) VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING');
    return this.db().transaction(() => {
      let queued = (this.q('SELECT COUNT(*) AS n FROM webhook_deliveries').get() as { n: number }).n;
      let added = 0;
      for (const d of ds) {
        if (queued >= max) break;
        if (ins.run(d.id, d.webhookID, d.eventID, d.dueAt, JSON.stringify(d)).changes > 0) (queued++, added++);
      }
      return added;
    })();
  }

  async claimDeliveries(now: number, limit: number, claimMs: number): Promise<Delivery[]> {
    return this.db().transaction(() => {
      const rows = this.q('SELECT id, body FROM webhook_deliveries WHERE due_at <= ? AND claim_until <= ? ORDER BY due_at LIMIT ?').all(
        now,
        now,
        limit,
      ) as (Row & { id: string })[];
      const claim = this.q('UPDATE webhook_deliveries SET claim_until = ? WHERE id = ?');
      for (const r of rows) claim.run(now + claimMs, r.id);
      return rows.map((r) => JSON.parse(r.body) as Delivery);
    })();
  }

  async finishDelivery(id: string): Promise<void> {
    this.q('DELETE FROM webhook_deliveries WHERE id = ?').run(id);
  }

  async retryDelivery(d: Delivery): Promise<void> {
    this.q('UPDATE webhook_deliveries SET due_at = ?, claim_until = 0, body = ? WHERE id = ?').run(d.dueAt, JSON.stringify(d), d.id);
  }

  async queuedDeliveries(): Promise<number> {
    return (this.q('SELECT COUNT(*) AS n FROM webhook_deliveries').get() as { n: number }).n;
  }

  async getCursor(name: string): Promise<number | undefined> {
    return (this.q('SELECT value FROM cursors WHERE name = ?').get(name) as { value: number } | undefined)?.value;
  }

  async setCursor(name: string, value: number): Promise<void> {
    this.q('INSERT INTO cursors (name, value) VALUES (?, ?) ON CONFLICT(name) DO UPDATE SET value = excluded.value').run(name, value);
  }

  async pruneLifecycle(tombstonesBefore: number, eventsBefore: number): Promise<void> {
    this.q('DELETE FROM tombstones WHERE at < ?').run(tombstonesBefore);
    this.q('DELETE FROM lifecycle_events WHERE at < ?').run(eventsBefore);
    this.q('DELETE FROM ended_sandboxes WHERE at < ?').run(eventsBefore);
  }
}
