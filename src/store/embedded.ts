// StateStore on one SQLite file (<data-dir>/cubed.db) for role all. better-sqlite3 is
// synchronous and fast (microseconds per statement); the async surface is the contract's.
import Database from 'better-sqlite3';
import type { EventView, SandboxState } from '../api/types.js';
import type { ListFilter, SandboxRecord, SnapshotRecord } from '../scheduler/control-plane.js';
import { CubeError } from '../errors.js';
import { matchesFilter, recordJson, type AuditRecord, type ConfigVersionRecord, type NodeRecord, type StateStore } from './types.js';

// Append-only list: a migration, once released, never changes; new ones go at the end.
const MIGRATIONS: string[] = [
  `CREATE TABLE sandboxes (id TEXT PRIMARY KEY, state TEXT NOT NULL, node_id TEXT NOT NULL, template_id TEXT NOT NULL, record TEXT NOT NULL);
   CREATE INDEX sandboxes_state ON sandboxes(state);
   CREATE TABLE events (id INTEGER PRIMARY KEY AUTOINCREMENT, at TEXT NOT NULL, body TEXT NOT NULL);
   CREATE TABLE config_versions (version INTEGER PRIMARY KEY, at TEXT NOT NULL, actor TEXT NOT NULL, reason TEXT NOT NULL, master TEXT NOT NULL, cubelet TEXT NOT NULL);
   CREATE TABLE audit (id INTEGER PRIMARY KEY AUTOINCREMENT, at TEXT NOT NULL, actor TEXT NOT NULL, action TEXT NOT NULL, target TEXT NOT NULL, outcome TEXT NOT NULL, detail TEXT);
   CREATE INDEX audit_actor ON audit(actor);
   CREATE TABLE nodes (node_id TEXT PRIMARY KEY, record TEXT NOT NULL);`,
  `ALTER TABLE sandboxes ADD COLUMN generation INTEGER NOT NULL DEFAULT 0;`,
  `CREATE TABLE snapshots (id TEXT PRIMARY KEY, node_id TEXT NOT NULL, created_at TEXT NOT NULL, record TEXT NOT NULL);`,
];

export interface EmbeddedStoreOptions {
  /** File path, or ':memory:'. */
  path: string;
  /** Events kept; older ones are pruned on append. */
  eventRetention?: number;
}

export class EmbeddedStore implements StateStore {
  private db?: Database.Database;
  private readonly retention: number;

  constructor(private readonly opts: EmbeddedStoreOptions) {
    this.retention = opts.eventRetention ?? 10_000;
  }

  async init(): Promise<void> {
    try {
      const db = new Database(this.opts.path);
      db.pragma('journal_mode = WAL');
      db.pragma('synchronous = NORMAL');
      db.pragma('busy_timeout = 5000');
      const current = db.pragma('user_version', { simple: true }) as number;
      db.transaction(() => {
        for (let v = current; v < MIGRATIONS.length; v++) db.exec(MIGRATIONS[v]!);
        db.pragma(`user_version = ${MIGRATIONS.length}`);
      })();
      this.db = db;
    } catch (e) {
      throw new CubeError('STATE_UNAVAILABLE', `cannot open state database ${this.opts.path}: ${(e as Error).message}`, { cause: e });
    }
  }

  async close(): Promise<void> {
    this.db?.close();
    this.db = undefined;
    this.statements.clear();
  }

  private get d(): Database.Database {
    if (!this.db) throw new CubeError('STATE_UNAVAILABLE', 'state store is not open');
    return this.db;
  }

  /** Statements compiled once per open database: preparing one per call was ~1 ms of every create and delete. */
  private readonly statements = new Map<string, Database.Statement>();

  private q(sql: string): Database.Statement {
    let st = this.statements.get(sql);
    if (!st) {
      st = this.d.prepare(sql);
      this.statements.set(sql, st);
    }
    return st;
  }

  async putSandbox(rec: SandboxRecord): Promise<number> {
    const row = this.q('INSERT INTO sandboxes (id, state, node_id, template_id, record, generation) VALUES (?, ?, ?, ?, ?, 1) ON CONFLICT(id) DO UPDATE SET state=excluded.state, node_id=excluded.node_id, template_id=excluded.template_id, record=excluded.record, generation=generation+1 RETURNING generation')
      .get(rec.sandboxID, rec.state, rec.nodeID, rec.templateID, recordJson(rec)) as { generation: number };
    return row.generation;
  }

  async putSandboxIf(rec: SandboxRecord, generation: number): Promise<number> {
    const row =
      generation === 0
        ? this.q('INSERT INTO sandboxes (id, state, node_id, template_id, record, generation) VALUES (?, ?, ?, ?, ?, 1) ON CONFLICT(id) DO NOTHING RETURNING generation').get(rec.sandboxID, rec.state, rec.nodeID, rec.templateID, recordJson(rec))
        : this.q('UPDATE sandboxes SET state=?, node_id=?, template_id=?, record=?, generation=generation+1 WHERE id=? AND generation=? RETURNING generation').get(rec.state, rec.nodeID, rec.templateID, recordJson(rec), rec.sandboxID, generation);
    return (row as { generation: number } | undefined)?.generation ?? 0;
  }

  async deleteSandboxIf(sandboxID: string, generation: number): Promise<boolean> {
    return this.q('DELETE FROM sandboxes WHERE id = ? AND generation = ?').run(sandboxID, generation).changes > 0;
  }

  async updateSandboxState(sandboxID: string, state: SandboxState, reason?: string): Promise<boolean> {
    const rec = await this.getSandbox(sandboxID);
    if (!rec) return false;
    rec.state = state;
    if (reason === undefined) delete rec.reason;
    else rec.reason = reason;
    await this.putSandbox(rec);
    return true;
  }

  async getSandbox(sandboxID: string): Promise<SandboxRecord | undefined> {
    const row = this.q('SELECT record, generation FROM sandboxes WHERE id = ?').get(sandboxID) as { record: string; generation: number } | undefined;
    return row ? { ...(JSON.parse(row.record) as SandboxRecord), generation: row.generation } : undefined;
  }

  async listSandboxes(filter?: ListFilter): Promise<SandboxRecord[]> {
    const rows = this.q('SELECT record, generation FROM sandboxes ORDER BY rowid').all() as { record: string; generation: number }[];
    return rows.map((r) => ({ ...(JSON.parse(r.record) as SandboxRecord), generation: r.generation })).filter((r) => matchesFilter(r, filter));
  }

  async deleteSandbox(sandboxID: string): Promise<void> {
    this.q('DELETE FROM sandboxes WHERE id = ?').run(sandboxID);
  }

  async appendEvent(e: Omit<EventView, 'id'>): Promise<EventView> {
    const d = this.d;
    const id = d.transaction(() => {
      const info = this.q('INSERT INTO events (at, body) VALUES (?, ?)').run(e.at, JSON.stringify(e));
      const newID = Number(info.lastInsertRowid);
      this.q('DELETE FROM events WHERE id <= ?').run(newID - this.retention);
      return newID;
    })();
    return { ...e, id };
  }

  async listEvents(opts: { sinceID?: number; beforeID?: number; limit?: number } = {}): Promise<EventView[]> {
    const limit = Math.max(1, Math.min(opts.limit ?? 100, 10_000));
    const rows =
      opts.sinceID !== undefined
        ? (this.q('SELECT id, body FROM events WHERE id > ? ORDER BY id LIMIT ?').all(opts.sinceID, limit) as { id: number; body: string }[])
        : (this.q('SELECT id, body FROM (SELECT id, body FROM events WHERE id < ? ORDER BY id DESC LIMIT ?) ORDER BY id').all(opts.beforeID ?? Number.MAX_SAFE_INTEGER, limit) as { id: number; body: string }[]);
    return rows.map((r) => ({ ...(JSON.parse(r.body) as Omit<EventView, 'id'>), id: r.id }));
  }

  async putConfigVersion(rec: ConfigVersionRecord): Promise<void> {
    this.q('INSERT OR REPLACE INTO config_versions (version, at, actor, reason, master, cubelet) VALUES (?, ?, ?, ?, ?, ?)')
      .run(rec.version, rec.at, rec.actor, rec.reason, JSON.stringify(rec.master), JSON.stringify(rec.cubelet));
  }

  async latestConfigVersion(): Promise<ConfigVersionRecord | undefined> {
    return (await this.listConfigVersions(1))[0];
  }

  async listConfigVersions(limit = 20): Promise<ConfigVersionRecord[]> {
    const rows = this.q('SELECT * FROM config_versions ORDER BY version DESC LIMIT ?').all(limit) as {
      version: number;
      at: string;
      actor: string;
      reason: string;
      master: string;
      cubelet: string;
    }[];
    return rows.map((r) => ({ ...r, master: JSON.parse(r.master), cubelet: JSON.parse(r.cubelet) }));
  }

  async appendAudit(rec: Omit<AuditRecord, 'id'>): Promise<AuditRecord> {
    const info = this.q('INSERT INTO audit (at, actor, action, target, outcome, detail) VALUES (?, ?, ?, ?, ?, ?)')
      .run(rec.at, rec.actor, rec.action, rec.target, rec.outcome, rec.detail === undefined ? null : JSON.stringify(rec.detail));
    return { ...rec, id: Number(info.lastInsertRowid) };
  }

  async listAudit(opts: { limit?: number; actor?: string } = {}): Promise<AuditRecord[]> {
    const limit = opts.limit ?? 100;
    const rows = (
      opts.actor !== undefined
        ? this.q('SELECT * FROM audit WHERE actor = ? ORDER BY id DESC LIMIT ?').all(opts.actor, limit)
        : this.q('SELECT * FROM audit ORDER BY id DESC LIMIT ?').all(limit)
    ) as (Omit<AuditRecord, 'detail'> & { detail: string | null })[];
    return rows.map(({ detail, ...r }) => (detail === null ? r : { ...r, detail: JSON.parse(detail) as Record<string, unknown> }));
  }

  async putNode(rec: NodeRecord): Promise<void> {
    this.q('INSERT OR REPLACE INTO nodes (node_id, record) VALUES (?, ?)').run(rec.nodeID, JSON.stringify(rec));
  }

  async getNode(nodeID: string): Promise<NodeRecord | undefined> {
    const row = this.q('SELECT record FROM nodes WHERE node_id = ?').get(nodeID) as { record: string } | undefined;
    return row ? (JSON.parse(row.record) as NodeRecord) : undefined;
  }

  async listNodes(): Promise<NodeRecord[]> {
    return (this.q('SELECT record FROM nodes ORDER BY node_id').all() as { record: string }[]).map((r) => JSON.parse(r.record) as NodeRecord);
  }

  async deleteNode(nodeID: string): Promise<void> {
    this.q('DELETE FROM nodes WHERE node_id = ?').run(nodeID);
  }

  async putSnapshot(rec: SnapshotRecord): Promise<void> {
    this.q('INSERT OR REPLACE INTO snapshots (id, node_id, created_at, record) VALUES (?, ?, ?, ?)').run(rec.snapshotID, rec.nodeID, rec.createdAt, JSON.stringify(rec));
  }

  async getSnapshot(snapshotID: string): Promise<SnapshotRecord | undefined> {
    const row = this.q('SELECT record FROM snapshots WHERE id = ?').get(snapshotID) as { record: string } | undefined;
    return row ? (JSON.parse(row.record) as SnapshotRecord) : undefined;
  }

  async listSnapshots(): Promise<SnapshotRecord[]> {
    return (this.q('SELECT record FROM snapshots ORDER BY created_at, id').all() as { record: string }[]).map((r) => JSON.parse(r.record) as SnapshotRecord);
  }

  async deleteSnapshot(snapshotID: string): Promise<boolean> {
    return this.q('DELETE FROM snapshots WHERE id = ?').run(snapshotID).changes > 0;
  }
}

