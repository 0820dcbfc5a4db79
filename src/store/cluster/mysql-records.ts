// The durable half of the cluster store: nodes registry, templates, sandbox history (the source
// of truth for which sandboxes exist), config versions and the audit trail.
import { randomUUID } from 'node:crypto';
import mysql from 'mysql2/promise';
import { eventWithEpochTime, isFloodKind, type EventView } from '../../model/event.js';
import { snapshotWithEpochTime, type SandboxRecord, type SnapshotRecord } from '../../model/sandbox.js';
import { isoTime } from '../../model/time.js';
import type { VolumeRecord } from '../../model/volume.js';
import { CubeError } from '../../errors.js';
import type { ApiKeyRecord } from '../../model/api-key.js';
import {
  createKeyRow,
  parseNodeRecord,
  parseRecord,
  patchedKey,
  recordJson,
  type ApiKeyPatch,
  type AuditRecord,
  type ConfigVersionRecord,
  type CreateKeyRecord,
  type CreateKeyRow,
  type NodeRecord,
} from '../types.js';
import { GroupCommit } from './group-commit.js';
import { MysqlLifecycle } from './mysql-lifecycle.js';
import { MIGRATIONS } from './mysql-schema.js';
import { isConnectionError, unavailable, withRetry } from './retry.js';

/** A write that may go in a batch: its SQL, arguments, and whether running it twice is harmless (see q). */
interface Write {
  sql: string;
  args: unknown[];
  idempotent: boolean;
}

/** Each write's own outcome within a batch. */
type Outcome = { ok: mysql.ResultSetHeader } | { err: unknown };

/** Writes per batch: one packet of a few hundred KB at most (records are about 1 KB). */
const MAX_BATCH = 200;

export class MysqlRecords {
  private pool?: mysql.Pool;
  /** The batches' connection: multi-statement queries, used for nothing else (see batch). */
  private batchPool?: mysql.Pool;
  private readonly database: string;
  private readonly base: URL;
  readonly lifecycle = new MysqlLifecycle((sql, args, idempotent) => this.q(sql, args, idempotent));
  /** When this replica last dropped expired create keys. */
  private prunedAt = 0;

  constructor(url: string) {
    this.base = new URL(url);
    this.database = decodeURIComponent(this.base.pathname.replace(/^\//, ''));
    if (!/^[A-Za-z0-9_]+$/.test(this.database)) throw new Error(`MySQL URL must name a database (letters, digits, _): ${url}`);
  }

  /** Creates the database if needed and applies missing migrations, serialised across replicas by a named lock. */
  async init(): Promise<void> {
    const admin = await mysql.createConnection({ ...this.connOpts(), database: undefined });
    try {
      await admin.query(`CREATE DATABASE IF NOT EXISTS \`${this.database}\``);
    } finally {
      await admin.end();
    }
    this.pool = mysql.createPool({ ...this.connOpts(), database: this.database, connectionLimit: 8, enableKeepAlive: true, waitForConnections: true });
    // One connection: a GroupCommit runs one batch at a time. Its statements are formatted by the
    // client from placeholders, as every other query here is.
    this.batchPool = mysql.createPool({
      ...this.connOpts(),
      database: this.database,
      connectionLimit: 1,
      enableKeepAlive: true,
      waitForConnections: true,
      multipleStatements: true,
    });
    const conn = await this.pool.getConnection();
    try {
      await conn.query(`SELECT GET_LOCK('cube_migrations', 30)`);
      await conn.query(
        `CREATE TABLE IF NOT EXISTS schema_migrations (version INT PRIMARY KEY, applied_at DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3)) ENGINE=InnoDB`,
      );
      const [rows] = await conn.query<mysql.RowDataPacket[]>('SELECT COALESCE(MAX(version), 0) AS v FROM schema_migrations');
      for (let v = Number(rows[0]!.v); v < MIGRATIONS.length; v++) {
        await conn.query(MIGRATIONS[v]!);
        await conn.query('INSERT IGNORE INTO schema_migrations (version) VALUES (?)', [v + 1]);
      }
    } finally {
      // A lost connection releases MySQL's named lock by itself.
      await conn.query(`SELECT RELEASE_LOCK('cube_migrations')`).catch(() => undefined);
      conn.release();
    }
  }

  private connOpts(): mysql.ConnectionOptions {
    return {
      host: this.base.hostname,
      port: Number(this.base.port || 3306),
      user: decodeURIComponent(this.base.username || 'root'),
      password: decodeURIComponent(this.base.password),
      connectTimeout: 2000,
    };
  }

  async close(): Promise<void> {
    const pools = [this.pool, this.batchPool];
    this.pool = this.batchPool = undefined;
    await Promise.all(pools.filter((p) => p !== undefined).map((p) => p.end()));
  }

  /** Drops the whole database (tests). */
  async dropDatabase(): Promise<void> {
    const admin = await mysql.createConnection(this.connOpts());
    try {
      await admin.query(`DROP DATABASE IF EXISTS \`${this.database}\``);
    } finally {
      await admin.end();
    }
  }

  private async q<T extends mysql.RowDataPacket[] | mysql.ResultSetHeader>(sql: string, args: unknown[] = [], idempotent = true): Promise<T> {
    return withRetry(
      'MySQL',
      async () => {
        if (!this.pool) throw Object.assign(new Error('Pool is closed'), { code: 'PROTOCOL_CONNECTION_LOST' });
        const [r] = await this.pool.query<T>(sql, args);
        return r;
      },
      idempotent,
    );
  }

  /**
   * A record or audit write, in the next batch with whatever other writes come meanwhile: one
   * round trip and one InnoDB commit for the lot (group commit). A create makes three such writes
   * (its pending record, the node's answer over it, the audit row), and as single statements they
   * were most of the control's MySQL work at 32 concurrent creates. Each write still gets its own
   * answer or error, and is committed when its promise resolves, as a single statement would be.
   */
  private async write(sql: string, args: unknown[], idempotent = true): Promise<mysql.ResultSetHeader> {
    const o = await this.writes.add({ sql, args, idempotent });
    if ('err' in o) throw o.err;
    return o.ok;
  }

  private readonly writes = new GroupCommit<Write, Outcome>((ws) => this.batch(ws), MAX_BATCH);

  /**
   * One transaction, sent as one multi-statement query. A statement that fails stops the query
   * before COMMIT: the batch is rolled back and each write runs again on its own, so only the one
   * at fault gets the error. A connection lost on the way may have taken the COMMIT with it:
   * idempotent writes run again on their own, the others answer 503 (as a single statement would).
   */
  private async batch(ws: Write[]): Promise<Outcome[]> {
    const alone = (w: Write) =>
      this.q<mysql.ResultSetHeader>(w.sql, w.args, w.idempotent).then(
        (ok): Outcome => ({ ok }),
        (err: unknown): Outcome => ({ err }),
      );
    if (ws.length === 1) return [await alone(ws[0]!)];
    let conn: mysql.PoolConnection;
    try {
      if (!this.batchPool) throw Object.assign(new Error('Pool is closed'), { code: 'PROTOCOL_CONNECTION_LOST' });
      conn = await this.batchPool.getConnection();
    } catch (e) {
      // Nothing was sent: each on its own path (its retries, or its error).
      if (isConnectionError(e)) return Promise.all(ws.map(alone));
      throw e;
    }
    const sql = ['START TRANSACTION', ...ws.map((w) => conn.format(w.sql, w.args)), 'COMMIT'].join(';\n');
    try {
      const [results] = await conn.query<mysql.ResultSetHeader[]>(sql);
      conn.release();
      return results.slice(1, -1).map((ok) => ({ ok }));
    } catch (e) {
      if (isConnectionError(e)) {
        conn.destroy();
        return Promise.all(ws.map((w) => (w.idempotent ? alone(w) : Promise.resolve({ err: unavailable('MySQL', e) }))));
      }
      // The transaction is still open on this connection: rolled back before it is used again.
      await conn.query('ROLLBACK').then(
        () => conn.release(),
        () => conn.destroy(),
      );
      return Promise.all(ws.map(alone));
    }
  }

  /** Inserts or replaces (a deleted id comes back live); returns the new generation. */
  async putSandbox(rec: SandboxRecord): Promise<number> {
    const r = await this.write(
      'INSERT INTO sandbox_history (sandbox_id, node_id, template_id, state, record, generation) VALUES (?, ?, ?, ?, ?, 1) ON DUPLICATE KEY UPDATE node_id=VALUES(node_id), template_id=VALUES(template_id), state=VALUES(state), record=VALUES(record), deleted_at=NULL, generation=LAST_INSERT_ID(generation + 1)',
      [rec.sandboxID, rec.nodeID, rec.templateID, rec.state, recordJson(rec)],
    );
    // 1 row: inserted (generation 1); 2: updated, and LAST_INSERT_ID carries the new generation.
    return r.affectedRows === 1 ? 1 : Number(r.insertId);
  }

  /** See StateStore.putSandboxIf; generation 0 refuses any id the history holds, deleted ones too. */
  async putSandboxIf(rec: SandboxRecord, generation: number): Promise<number> {
    if (generation === 0) {
      const r = await this.write('INSERT IGNORE INTO sandbox_history (sandbox_id, node_id, template_id, state, record, generation) VALUES (?, ?, ?, ?, ?, 1)', [
        rec.sandboxID,
        rec.nodeID,
        rec.templateID,
        rec.state,
        recordJson(rec),
      ]);
      return r.affectedRows === 1 ? 1 : 0;
    }
    const r = await this.write(
      'UPDATE sandbox_history SET node_id=?, template_id=?, state=?, record=?, generation=LAST_INSERT_ID(generation + 1) WHERE sandbox_id=? AND generation=? AND deleted_at IS NULL',
      [rec.nodeID, rec.templateID, rec.state, recordJson(rec), rec.sandboxID, generation],
    );
    return r.affectedRows === 1 ? Number(r.insertId) : 0;
  }

  async markSandboxDeleted(sandboxID: string, generation?: number): Promise<boolean> {
    const r =
      generation === undefined
        ? await this.q<mysql.ResultSetHeader>(
            "UPDATE sandbox_history SET deleted_at = CURRENT_TIMESTAMP(3), state = 'gone', generation = generation + 1 WHERE sandbox_id = ? AND deleted_at IS NULL",
            [sandboxID],
          )
        : await this.q<mysql.ResultSetHeader>(
            "UPDATE sandbox_history SET deleted_at = CURRENT_TIMESTAMP(3), state = 'gone', generation = generation + 1 WHERE sandbox_id = ? AND generation = ? AND deleted_at IS NULL",
            [sandboxID, generation],
          );
    return r.affectedRows === 1;
  }

  async getLiveSandbox(sandboxID: string): Promise<SandboxRecord | undefined> {
    const rows = await this.q<mysql.RowDataPacket[]>('SELECT record, generation FROM sandbox_history WHERE sandbox_id = ? AND deleted_at IS NULL', [sandboxID]);
    return rows[0] ? rowRecord(rows[0]) : undefined;
  }

  /** Whether the history holds this sandbox as deleted (and not live again). */
  async wasDeleted(sandboxID: string): Promise<boolean> {
    const rows = await this.q<mysql.RowDataPacket[]>('SELECT deleted_at FROM sandbox_history WHERE sandbox_id = ?', [sandboxID]);
    return rows[0] !== undefined && rows[0].deleted_at !== null;
  }

  /** Which of `ids` the history holds as deleted. */
  async deletedAmong(ids: string[]): Promise<Set<string>> {
    if (ids.length === 0) return new Set();
    const rows = await this.q<mysql.RowDataPacket[]>('SELECT sandbox_id FROM sandbox_history WHERE sandbox_id IN (?) AND deleted_at IS NOT NULL', [ids]);
    return new Set(rows.map((r) => r.sandbox_id as string));
  }

  /** Every sandbox not deleted, in creation order: what the routes must hold. */
  async liveSandboxes(): Promise<SandboxRecord[]> {
    const rows = await this.q<mysql.RowDataPacket[]>('SELECT record, generation FROM sandbox_history WHERE deleted_at IS NULL ORDER BY seq');
    return rows.map(rowRecord);
  }

  /** Idempotent (by id): a retry after a lost answer writes nothing twice. */
  async putEvents(events: EventView[]): Promise<void> {
    if (events.length === 0) return;
    await this.q('INSERT IGNORE INTO events (id, body, flood) VALUES ?', [events.map(({ id, ...e }) => [id, JSON.stringify(e), isFloodKind(e.kind) ? 1 : 0])]);
  }

  /** Drops events older than the newest `keep`. */
  /** Keeps the newest `keep` events of the lifecycle kinds and again of the flood kinds. */
  async pruneEvents(keep: number): Promise<void> {
    for (const flood of [0, 1]) {
      await this.q(
        'DELETE FROM events WHERE flood = ? AND id <= (SELECT m FROM (SELECT id AS m FROM events WHERE flood = ? ORDER BY id DESC LIMIT 1 OFFSET ?) AS t)',
        [flood, flood, keep],
      );
    }
  }

  /** The newest `limit` events of each class (lifecycle, flood), oldest first, and the highest id ever recorded. */
  async latestEvents(limit: number): Promise<{ maxID: number; events: EventView[] }> {
    const rows = await this.q<mysql.RowDataPacket[]>(
      '(SELECT id, body FROM events WHERE flood = 0 ORDER BY id DESC LIMIT ?) UNION ALL (SELECT id, body FROM events WHERE flood = 1 ORDER BY id DESC LIMIT ?)',
      [limit, limit],
    );
    const events = rows
      .map((r) => ({ ...eventWithEpochTime(JSON.parse(r.body as string) as Omit<EventView, 'id'>), id: Number(r.id) }))
      .sort((a, b) => a.id - b.id);
    return { maxID: events.at(-1)?.id ?? 0, events };
  }

  async putConfigVersion(rec: ConfigVersionRecord): Promise<void> {
    await this.q('REPLACE INTO config_versions (version, at, actor, reason, master, cubelet) VALUES (?, ?, ?, ?, ?, ?)', [
      rec.version,
      rec.at,
      rec.actor,
      rec.reason,
      JSON.stringify(rec.master),
      JSON.stringify(rec.cubelet),
    ]);
  }

  /** The cluster's config in force (undefined until a replica seeded it from its files). */
  async configHead(): Promise<ConfigVersionRecord | undefined> {
    const rows = await this.q<mysql.RowDataPacket[]>('SELECT * FROM config_head WHERE id = 1');
    const r = rows[0];
    return r ? { version: r.version, at: r.at, actor: r.actor, reason: r.reason, master: JSON.parse(r.master), cubelet: JSON.parse(r.cubelet) } : undefined;
  }

  /**
   * Makes `rec` the config in force if the one in force is still version `expected` (0: none
   * yet), and records it in the history, in one transaction; false when another change came
   * first. A retry after a lost answer finds its own write in force (by this call's commit id):
   * true, not a false "lost".
   */
  async casConfigHead(rec: ConfigVersionRecord, expected: number): Promise<boolean> {
    const args = [rec.version, rec.at, rec.actor, rec.reason, JSON.stringify(rec.master), JSON.stringify(rec.cubelet)];
    const commitID = randomUUID();
    return withRetry('MySQL', async () => {
      if (!this.pool) throw Object.assign(new Error('Pool is closed'), { code: 'PROTOCOL_CONNECTION_LOST' });
      const conn = await this.pool.getConnection();
      try {
        await conn.beginTransaction();
        const [r] =
          expected === 0
            ? await conn.query<mysql.ResultSetHeader>(
                'INSERT IGNORE INTO config_head (id, version, at, actor, reason, master, cubelet, commit_id) VALUES (1, ?, ?, ?, ?, ?, ?, ?)',
                [...args, commitID],
              )
            : await conn.query<mysql.ResultSetHeader>(
                'UPDATE config_head SET version = ?, at = ?, actor = ?, reason = ?, master = ?, cubelet = ?, commit_id = ? WHERE id = 1 AND version = ?',
                [...args, commitID, expected],
              );
        if (r.affectedRows === 1)
          await conn.query('REPLACE INTO config_versions (version, at, actor, reason, master, cubelet) VALUES (?, ?, ?, ?, ?, ?)', args);
        await conn.commit();
        if (r.affectedRows === 1) return true;
        const [rows] = await conn.query<mysql.RowDataPacket[]>('SELECT commit_id FROM config_head WHERE id = 1');
        return rows[0]?.commit_id === commitID;
      } catch (e) {
        // A connection that failed mid-transaction is not handed out again.
        conn.destroy();
        throw e;
      } finally {
        conn.release();
      }
    });
  }

  async listConfigVersions(limit = 20): Promise<ConfigVersionRecord[]> {
    const rows = await this.q<mysql.RowDataPacket[]>('SELECT * FROM config_versions ORDER BY version DESC LIMIT ?', [limit]);
    return rows.map((r) => ({ version: r.version, at: r.at, actor: r.actor, reason: r.reason, master: JSON.parse(r.master), cubelet: JSON.parse(r.cubelet) }));
  }

  /** Goes in a batch with other writes (write): one append may not run twice. */
  async appendAudit(rec: Omit<AuditRecord, 'id' | 'actorName'>): Promise<AuditRecord> {
    const r = await this.write(
      'INSERT INTO audit (at, actor, actor_name, action, target, outcome, detail) VALUES (?, ?, (SELECT name FROM api_keys WHERE id = ?), ?, ?, ?, ?)',
      [rec.at, rec.actor, rec.actor, rec.action, rec.target, rec.outcome, rec.detail === undefined ? null : JSON.stringify(rec.detail)],
      false,
    );
    return { ...rec, id: r.insertId };
  }

  async listAudit(opts: { limit?: number; actor?: string } = {}): Promise<AuditRecord[]> {
    const limit = opts.limit ?? 100;
    const rows =
      opts.actor !== undefined
        ? await this.q<mysql.RowDataPacket[]>('SELECT * FROM audit WHERE actor = ? ORDER BY id DESC LIMIT ?', [opts.actor, limit])
        : await this.q<mysql.RowDataPacket[]>('SELECT * FROM audit ORDER BY id DESC LIMIT ?', [limit]);
    return rows.map((r) => {
      const base = {
        id: Number(r.id),
        at: r.at as string,
        actor: r.actor as string,
        ...(r.actor_name !== null ? { actorName: r.actor_name as string } : {}),
        action: r.action as string,
        target: r.target as string,
        outcome: r.outcome as string,
      };
      return r.detail === null ? base : { ...base, detail: JSON.parse(r.detail as string) as Record<string, unknown> };
    });
  }

  /** false when the id, name or hash is taken. */
  async putApiKey(rec: ApiKeyRecord): Promise<boolean> {
    const r = await this.q<mysql.ResultSetHeader>(
      'INSERT IGNORE INTO api_keys (id, name, hash, record) VALUES (?, ?, ?, ?)',
      [rec.id, rec.name, rec.hash, JSON.stringify(rec)],
      false,
    );
    return r.affectedRows === 1;
  }

  async getApiKey(id: string): Promise<ApiKeyRecord | undefined> {
    return keyRow(await this.q<mysql.RowDataPacket[]>('SELECT record FROM api_keys WHERE id = ?', [id]));
  }

  async apiKeyByHash(hash: string): Promise<ApiKeyRecord | undefined> {
    return keyRow(await this.q<mysql.RowDataPacket[]>('SELECT record FROM api_keys WHERE hash = ?', [hash]));
  }

  async listApiKeys(): Promise<ApiKeyRecord[]> {
    return (await this.q<mysql.RowDataPacket[]>('SELECT record FROM api_keys ORDER BY seq')).map((r) => JSON.parse(r.record as string) as ApiKeyRecord);
  }

  /** Compare-and-set on the record read: a change another replica made meanwhile is read again and kept. */
  async updateApiKey(id: string, patch: ApiKeyPatch): Promise<ApiKeyRecord | undefined> {
    for (;;) {
      const rows = await this.q<mysql.RowDataPacket[]>('SELECT record FROM api_keys WHERE id = ?', [id]);
      if (!rows[0]) return undefined;
      const raw = rows[0].record as string;
      const next = patchedKey(JSON.parse(raw) as ApiKeyRecord, patch);
      try {
        const r = await this.q<mysql.ResultSetHeader>('UPDATE api_keys SET name = ?, record = ? WHERE id = ? AND record = ?', [
          next.name,
          JSON.stringify(next),
          id,
          raw,
        ]);
        if (r.affectedRows === 1 || JSON.stringify(next) === raw) return next;
      } catch (e) {
        if ((e as { code?: string }).code === 'ER_DUP_ENTRY') throw new CubeError('CONFLICT', `an API key named ${JSON.stringify(next.name)} exists already`);
        throw e;
      }
    }
  }

  async deleteApiKey(id: string): Promise<boolean> {
    return (await this.q<mysql.ResultSetHeader>('DELETE FROM api_keys WHERE id = ?', [id])).affectedRows === 1;
  }

  async putNode(rec: NodeRecord): Promise<void> {
    await this.q('REPLACE INTO nodes (node_id, record) VALUES (?, ?)', [rec.nodeID, JSON.stringify(rec)]);
  }

  async getNode(nodeID: string): Promise<NodeRecord | undefined> {
    const rows = await this.q<mysql.RowDataPacket[]>('SELECT record FROM nodes WHERE node_id = ?', [nodeID]);
    return rows[0] ? parseNodeRecord(rows[0].record as string) : undefined;
  }

  async listNodes(): Promise<NodeRecord[]> {
    const rows = await this.q<mysql.RowDataPacket[]>('SELECT record FROM nodes ORDER BY node_id');
    return rows.map((r) => parseNodeRecord(r.record as string));
  }

  async deleteNode(nodeID: string): Promise<void> {
    await this.q('DELETE FROM nodes WHERE node_id = ?', [nodeID]);
    await this.q('DELETE FROM templates WHERE node_id = ?', [nodeID]);
  }

  async putSnapshot(rec: SnapshotRecord): Promise<void> {
    // created_at keeps ISO 8601, as in the rows before numeric times: they sort together.
    await this.q('REPLACE INTO snapshots (snapshot_id, node_id, created_at, record) VALUES (?, ?, ?, ?)', [
      rec.snapshotID,
      rec.nodeID,
      isoTime(rec.createdAt),
      JSON.stringify(rec),
    ]);
  }

  async getSnapshot(snapshotID: string): Promise<SnapshotRecord | undefined> {
    const rows = await this.q<mysql.RowDataPacket[]>('SELECT record FROM snapshots WHERE snapshot_id = ?', [snapshotID]);
    return rows[0] ? snapshotWithEpochTime(JSON.parse(rows[0].record as string) as SnapshotRecord) : undefined;
  }

  async listSnapshots(): Promise<SnapshotRecord[]> {
    const rows = await this.q<mysql.RowDataPacket[]>('SELECT record FROM snapshots ORDER BY created_at, snapshot_id');
    return rows.map((r) => snapshotWithEpochTime(JSON.parse(r.record as string) as SnapshotRecord));
  }

  async deleteSnapshot(snapshotID: string): Promise<boolean> {
    const r = await this.q<mysql.ResultSetHeader>('DELETE FROM snapshots WHERE snapshot_id = ?', [snapshotID]);
    return r.affectedRows > 0;
  }

  async addVolume(rec: VolumeRecord): Promise<boolean> {
    const r = await this.q<mysql.ResultSetHeader>('INSERT IGNORE INTO volumes (volume_id, owner, name, created_at, record) VALUES (?, ?, ?, ?, ?)', [
      rec.volumeID,
      rec.owner ?? '',
      rec.name,
      rec.createdAt,
      JSON.stringify(rec),
    ]);
    return r.affectedRows === 1;
  }

  async getVolume(volumeID: string): Promise<VolumeRecord | undefined> {
    const rows = await this.q<mysql.RowDataPacket[]>('SELECT record FROM volumes WHERE volume_id = ?', [volumeID]);
    return rows[0] ? (JSON.parse(rows[0].record as string) as VolumeRecord) : undefined;
  }

  async listVolumes(): Promise<VolumeRecord[]> {
    const rows = await this.q<mysql.RowDataPacket[]>('SELECT record FROM volumes ORDER BY created_at, volume_id');
    return rows.map((r) => JSON.parse(r.record as string) as VolumeRecord);
  }

  async deleteVolume(volumeID: string): Promise<boolean> {
    const r = await this.q<mysql.ResultSetHeader>('DELETE FROM volumes WHERE volume_id = ?', [volumeID]);
    return r.affectedRows > 0;
  }

  /**
   * StateStore.claimCreateKey in single statements, each atomic: an insert where no claim is, a
   * take-over of an expired or open one, then a read of the claim in force. Each may run again
   * (a retry after a lost answer): the read then finds this call's own claim.
   */
  async claimCreateKey(rec: CreateKeyRecord, over?: string): Promise<CreateKeyRecord> {
    const now = Date.now();
    const open = rec.outcome === undefined || 'failed' in rec.outcome ? 1 : 0;
    const outcome = rec.outcome === undefined ? null : JSON.stringify(rec.outcome);
    const ins = await this.q<mysql.ResultSetHeader>(
      'INSERT IGNORE INTO create_keys (k, sandbox_id, deadline, expires_at, outcome, open) VALUES (?, ?, ?, ?, ?, ?)',
      [rec.key, rec.sandboxID, rec.deadline, rec.expiresAt, outcome, open],
    );
    if (ins.affectedRows !== 1) {
      await this.q(
        'UPDATE create_keys SET sandbox_id = ?, deadline = ?, expires_at = ?, outcome = ?, open = ? WHERE k = ? AND (expires_at <= ? OR (sandbox_id = ? AND open = 1))',
        [rec.sandboxID, rec.deadline, rec.expiresAt, outcome, open, rec.key, now, over ?? ''],
      );
    }
    if (now - this.prunedAt > 60_000) {
      this.prunedAt = now;
      // Expired keys are ignored by every read; a failed prune is retried at the next one.
      await this.q('DELETE FROM create_keys WHERE expires_at <= ? LIMIT 10000', [now]).catch(() => undefined);
    }
    return (await this.getCreateKey(rec.key)) ?? rec;
  }

  async getCreateKey(key: string): Promise<CreateKeyRecord | undefined> {
    const rows = await this.q<mysql.RowDataPacket[]>('SELECT k, sandbox_id, deadline, expires_at, outcome FROM create_keys WHERE k = ? AND expires_at > ?', [
      key,
      Date.now(),
    ]);
    return rows[0] ? createKeyRow(rows[0] as unknown as CreateKeyRow) : undefined;
  }

  async settleCreateKey(key: string, sandboxID: string, outcome: NonNullable<CreateKeyRecord['outcome']>): Promise<boolean> {
    const r = await this.q<mysql.ResultSetHeader>('UPDATE create_keys SET outcome = ?, open = ? WHERE k = ? AND sandbox_id = ?', [
      JSON.stringify(outcome),
      'failed' in outcome ? 1 : 0,
      key,
      sandboxID,
    ]);
    // A retry after a lost answer changes nothing the second time: matched, not changed, is done too.
    return r.affectedRows === 1 || (await this.getCreateKey(key))?.sandboxID === sandboxID;
  }

  /** Replaces the templates a node reports holding. */
  async setNodeTemplates(nodeID: string, templateIDs: string[]): Promise<void> {
    await this.q('DELETE FROM templates WHERE node_id = ?', [nodeID]);
    if (templateIDs.length > 0) await this.q('INSERT IGNORE INTO templates (template_id, node_id) VALUES ?', [templateIDs.map((t) => [t, nodeID])]);
  }

  async listTemplates(): Promise<{ templateID: string; nodes: string[] }[]> {
    const rows = await this.q<mysql.RowDataPacket[]>('SELECT template_id, node_id FROM templates ORDER BY template_id, node_id');
    const by = new Map<string, string[]>();
    for (const r of rows) by.set(r.template_id as string, [...(by.get(r.template_id as string) ?? []), r.node_id as string]);
    return [...by].map(([templateID, nodes]) => ({ templateID, nodes }));
  }
}

function keyRow(rows: mysql.RowDataPacket[]): ApiKeyRecord | undefined {
  return rows[0] ? (JSON.parse(rows[0].record as string) as ApiKeyRecord) : undefined;
}

function rowRecord(r: mysql.RowDataPacket): SandboxRecord {
  return { ...parseRecord(r.record as string), generation: Number(r.generation) };
}
