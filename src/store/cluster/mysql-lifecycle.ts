// The lifecycle facet of the cluster store (src/store/lifecycle.ts), in MySQL: tombstones and
// queued deliveries must outlive a Redis restart (Redis keeps nothing on disk). Its tables are
// made by MysqlRecords' migrations (LIFECYCLE_MIGRATIONS).
import { randomUUID } from 'node:crypto';
import type mysql from 'mysql2/promise';
import type { Tombstone } from '../../model/death.js';
import type { Delivery, LifecycleEvent, LifecycleType, Webhook } from '../../model/lifecycle.js';
import { byAge, lifecycleWhere, type EndedSandbox, type LifecycleQuery, type LifecycleStore } from '../lifecycle.js';

export const LIFECYCLE_MIGRATIONS = [
  `CREATE TABLE IF NOT EXISTS tombstones (sandbox_id VARCHAR(64) PRIMARY KEY, at BIGINT NOT NULL, reason VARCHAR(32) NOT NULL, body TEXT NOT NULL, INDEX by_at (at)) ENGINE=InnoDB`,
  `CREATE TABLE IF NOT EXISTS lifecycle_events (seq BIGINT PRIMARY KEY AUTO_INCREMENT, id CHAR(36) NOT NULL UNIQUE, sandbox_id VARCHAR(64) NOT NULL, type VARCHAR(48) NOT NULL, owner VARCHAR(128) NULL,
     at BIGINT NOT NULL, body TEXT NOT NULL, INDEX by_sandbox (sandbox_id, at), INDEX by_at (at)) ENGINE=InnoDB`,
  `CREATE TABLE IF NOT EXISTS webhooks (id VARCHAR(64) PRIMARY KEY, body TEXT NOT NULL) ENGINE=InnoDB`,
  `CREATE TABLE IF NOT EXISTS webhook_deliveries (id CHAR(36) PRIMARY KEY, webhook_id VARCHAR(64) NOT NULL, event_id CHAR(36) NOT NULL, due_at BIGINT NOT NULL, claim_until BIGINT NOT NULL DEFAULT 0,
     claim CHAR(36) NULL, body MEDIUMTEXT NOT NULL, UNIQUE KEY one_per_event (webhook_id, event_id), INDEX due (due_at)) ENGINE=InnoDB`,
  `CREATE TABLE IF NOT EXISTS cursors (name VARCHAR(64) PRIMARY KEY, value BIGINT NOT NULL) ENGINE=InnoDB`,
  `CREATE TABLE IF NOT EXISTS ended_sandboxes (sandbox_id VARCHAR(64) PRIMARY KEY, at BIGINT NOT NULL, body TEXT NOT NULL, INDEX by_at (at)) ENGINE=InnoDB`,
];

/** A query on the store's pool (with its retries); `idempotent`: may run again after a lost connection. */
export type Query = <T extends mysql.RowDataPacket[] | mysql.ResultSetHeader>(sql: string, args?: unknown[], idempotent?: boolean) => Promise<T>;

type Rows = mysql.RowDataPacket[];
type Done = mysql.ResultSetHeader;

export class MysqlLifecycle implements LifecycleStore {
  constructor(private readonly q: Query) {}

  async putTombstone(t: Tombstone): Promise<boolean> {
    const body = JSON.stringify(t);
    if (
      (await this.q<Done>('INSERT IGNORE INTO tombstones (sandbox_id, at, reason, body) VALUES (?, ?, ?, ?)', [t.sandboxID, t.at, t.reason, body]))
        .affectedRows > 0
    )
      return true;
    // There is one: a typed reason replaces `vanished` (the client's found-rows flag makes an
    // upsert's count ambiguous, so two statements).
    if (t.reason === 'vanished') return false;
    return (
      (
        await this.q<Done>("UPDATE tombstones SET at = ?, reason = ?, body = ? WHERE sandbox_id = ? AND reason = 'vanished'", [
          t.at,
          t.reason,
          body,
          t.sandboxID,
        ])
      ).affectedRows > 0
    );
  }

  async getTombstone(sandboxID: string): Promise<Tombstone | undefined> {
    const rows = await this.q<Rows>('SELECT body FROM tombstones WHERE sandbox_id = ?', [sandboxID]);
    return rows[0] ? (JSON.parse(rows[0].body as string) as Tombstone) : undefined;
  }

  async putEndedSandbox(s: EndedSandbox): Promise<void> {
    await this.q('INSERT INTO ended_sandboxes (sandbox_id, at, body) VALUES (?, ?, ?) ON DUPLICATE KEY UPDATE at = VALUES(at), body = VALUES(body)', [
      s.sandboxID,
      s.at,
      JSON.stringify(s),
    ]);
  }

  async getEndedSandbox(sandboxID: string): Promise<EndedSandbox | undefined> {
    const rows = await this.q<Rows>('SELECT body FROM ended_sandboxes WHERE sandbox_id = ?', [sandboxID]);
    return rows[0] ? (JSON.parse(rows[0].body as string) as EndedSandbox) : undefined;
  }

  async appendLifecycleEvents(events: LifecycleEvent[]): Promise<void> {
    if (events.length === 0) return;
    await this.q('INSERT IGNORE INTO lifecycle_events (id, sandbox_id, type, owner, at, body) VALUES ?', [
      events.map((e) => [e.id, e.sandboxID, e.type, e.owner ?? null, e.at, JSON.stringify(e)]),
    ]);
  }

  async listLifecycleEvents(q: LifecycleQuery): Promise<LifecycleEvent[]> {
    const { where, args } = lifecycleWhere(q);
    const dir = q.orderAsc ? 'ASC' : 'DESC';
    const rows = await this.q<Rows>(`SELECT body FROM lifecycle_events${where} ORDER BY at ${dir}, seq ${dir} LIMIT ? OFFSET ?`, [...args, q.limit, q.offset]);
    return rows.map((r) => JSON.parse(r.body as string) as LifecycleEvent);
  }

  async lastLifecycleEvent(sandboxID: string, types: LifecycleType[]): Promise<LifecycleEvent | undefined> {
    return (await this.listLifecycleEvents({ sandboxID, types, offset: 0, limit: 1, orderAsc: false }))[0];
  }

  async putWebhook(w: Webhook): Promise<void> {
    await this.q('INSERT INTO webhooks (id, body) VALUES (?, ?) ON DUPLICATE KEY UPDATE body = VALUES(body)', [w.id, JSON.stringify(w)]);
  }

  async getWebhook(id: string): Promise<Webhook | undefined> {
    const rows = await this.q<Rows>('SELECT body FROM webhooks WHERE id = ?', [id]);
    return rows[0] ? (JSON.parse(rows[0].body as string) as Webhook) : undefined;
  }

  async listWebhooks(): Promise<Webhook[]> {
    return byAge((await this.q<Rows>('SELECT body FROM webhooks')).map((r) => JSON.parse(r.body as string) as Webhook));
  }

  async deleteWebhook(id: string): Promise<boolean> {
    await this.q('DELETE FROM webhook_deliveries WHERE webhook_id = ?', [id]);
    return (await this.q<Done>('DELETE FROM webhooks WHERE id = ?', [id])).affectedRows > 0;
  }

  async enqueueDeliveries(ds: Delivery[], max: number): Promise<number> {
    if (ds.length === 0) return 0;
    // Replicas enqueue one at a time (the lifecycle lease): the count is not raced.
    const room = max - (await this.queuedDeliveries());
    const take = ds.slice(0, Math.max(0, room));
    if (take.length === 0) return 0;
    const r = await this.q<Done>('INSERT IGNORE INTO webhook_deliveries (id, webhook_id, event_id, due_at, body) VALUES ?', [
      take.map((d) => [d.id, d.webhookID, d.eventID, d.dueAt, JSON.stringify(d)]),
    ]);
    return r.affectedRows;
  }

  async claimDeliveries(now: number, limit: number, claimMs: number): Promise<Delivery[]> {
    // One statement takes them (any replica may deliver): those it marked are this call's.
    const claim = randomUUID();
    const r = await this.q<Done>(
      'UPDATE webhook_deliveries SET claim = ?, claim_until = ? WHERE due_at <= ? AND claim_until <= ? ORDER BY due_at LIMIT ?',
      [claim, now + claimMs, now, now, limit],
      false,
    );
    if (r.affectedRows === 0) return [];
    return (await this.q<Rows>('SELECT body FROM webhook_deliveries WHERE claim = ?', [claim])).map((row) => JSON.parse(row.body as string) as Delivery);
  }

  async finishDelivery(id: string): Promise<void> {
    await this.q('DELETE FROM webhook_deliveries WHERE id = ?', [id]);
  }

  async retryDelivery(d: Delivery): Promise<void> {
    await this.q('UPDATE webhook_deliveries SET due_at = ?, claim_until = 0, claim = NULL, body = ? WHERE id = ?', [d.dueAt, JSON.stringify(d), d.id]);
  }

  async queuedDeliveries(): Promise<number> {
    return Number((await this.q<Rows>('SELECT COUNT(*) AS n FROM webhook_deliveries'))[0]!.n);
  }

  async getCursor(name: string): Promise<number | undefined> {
    const rows = await this.q<Rows>('SELECT value FROM cursors WHERE name = ?', [name]);
    return rows[0] ? Number(rows[0].value) : undefined;
  }

  async setCursor(name: string, value: number): Promise<void> {
    await this.q('INSERT INTO cursors (name, value) VALUES (?, ?) ON DUPLICATE KEY UPDATE value = VALUES(value)', [name, value]);
  }

  async pruneLifecycle(tombstonesBefore: number, eventsBefore: number): Promise<void> {
    await this.q('DELETE FROM tombstones WHERE at < ?', [tombstonesBefore]);
    await this.q('DELETE FROM lifecycle_events WHERE at < ?', [eventsBefore]);
    await this.q('DELETE FROM ended_sandboxes WHERE at < ?', [eventsBefore]);
  }
}
