// StateStore on one SQLite file (<data-dir>/cubed.db) for role all. better-sqlite3 is
// synchronous and fast (microseconds per statement); the async surface is the contract's.
// Records, events, config, the registry and templates are in SQLite; the live state (node
// views, lost markers, creates in flight, locks, leases) in memory, like the cluster's Redis,
// which keeps nothing on disk either: one process holds it, and a restart starts it over.
import Database from 'better-sqlite3';
import { chmodSync, closeSync, existsSync, openSync } from 'node:fs';
import { CubeError } from '../errors.js';
import { eventWithEpochTime, isFloodKind, type EventView } from '../model/event.js';
import type { NodeView } from '../model/node.js';
import type { VolumeRecord } from '../model/volume.js';
import { answeredRecord, snapshotWithEpochTime, type ListFilter, type SandboxRecord, type SandboxState, type SnapshotRecord } from '../model/sandbox.js';
import { isoTime } from '../model/time.js';
import type { ApiKeyRecord, KeyUsage, QuotaClaim, QuotaRefusal } from '../model/api-key.js';
import { EmbeddedKeys } from './embedded-keys.js';
import { EmbeddedLifecycle } from './embedded-lifecycle.js';
import { MIGRATIONS } from './embedded-schema.js';
import {
  createKeyRow,
  fenceFloor,
  matchesFilter,
  parseNodeRecord,
  parseRecord,
  recordJson,
  type ApiKeyPatch,
  type AuditRecord,
  type ConfigVersionRecord,
  type CreateKeyRecord,
  type CreateKeyRow,
  type NodeRecord,
  type StateStore,
} from './types.js';

/**
 * How long a deleted sandbox is remembered (wasDeleted): a node that was away longer than this
 * and still holds it has it adopted back instead of destroyed. Pruned at open, so the table holds
 * about a day of deletes (~10 MB at a sustained 100 deletes/s).
 */
const DELETED_KEEP_MS = 24 * 3600_000;

export interface EmbeddedStoreOptions {
  /** File path, or ':memory:'. */
  path: string;
  /** Events kept of the lifecycle kinds, and again of the flood kinds (model/event.ts); older ones are pruned on append. */
  eventRetention?: number;
}

// Records go without a made sandbox's `createBy` (SandboxRecord): here the record's write and the
// answer are one process's, with no I/O between them, so a written record was answered.
export class EmbeddedStore implements StateStore {
  private db?: Database.Database;
  private readonly retention: number;
  private readonly metrics = new Map<string, { view: NodeView; until: number }>();
  private readonly lost = new Set<string>();
  /** Each heartbeat sender's last notice appended (appendNodeEvent). In memory: the embedded store serves role all, whose node is in its process. */
  private readonly senders = new Map<string, number>();
  private readonly creating = new Map<string, number>();
  private readonly locks = new Map<string, { token: string; until: number }>();
  private readonly leases = new Map<string, { holder: string; until: number }>();
  private fence = fenceFloor();
  private readonly keys = new EmbeddedKeys((sql) => this.q(sql));
  readonly lifecycle = new EmbeddedLifecycle(
    (sql) => this.q(sql),
    () => this.d,
  );
  /** Claims since open: every 1000th prunes the expired keys. */
  private claims = 0;

  constructor(private readonly opts: EmbeddedStoreOptions) {
    this.retention = opts.eventRetention ?? 10_000;
  }

  async init(): Promise<void> {
    try {
      // Tokens and env vars live here: owner only, also when the file (or the data dir) existed
      // before with a looser mode; SQLite makes its -wal and -shm files with the database's mode.
      // (':memory:' is no file: opening it as one left an empty ':memory:' in the working directory.)
      const onDisk = this.opts.path !== ':memory:';
      if (onDisk) {
        closeSync(openSync(this.opts.path, 'a', 0o600));
        chmodSync(this.opts.path, 0o600);
      }
      const db = new Database(this.opts.path);
      db.pragma('journal_mode = WAL');
      if (onDisk) for (const side of ['-wal', '-shm']) if (existsSync(this.opts.path + side)) chmodSync(this.opts.path + side, 0o600);
      db.pragma('synchronous = NORMAL');
      db.pragma('busy_timeout = 5000');
      const current = db.pragma('user_version', { simple: true }) as number;
      db.transaction(() => {
        for (let v = current; v < MIGRATIONS.length; v++) db.exec(MIGRATIONS[v]!);
        db.pragma(`user_version = ${MIGRATIONS.length}`);
      })();
      db.prepare('DELETE FROM deleted_sandboxes WHERE at < ?').run(Date.now() - DELETED_KEEP_MS);
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
    rec = answeredRecord(rec);
    const row = this.q(
      'INSERT INTO sandboxes (id, state, node_id, template_id, record, generation) VALUES (?, ?, ?, ?, ?, 1) ON CONFLICT(id) DO UPDATE SET state=excluded.state, node_id=excluded.node_id, template_id=excluded.template_id, record=excluded.record, generation=generation+1 RETURNING generation',
    ).get(rec.sandboxID, rec.state, rec.nodeID, rec.templateID, recordJson(rec)) as { generation: number };
    return row.generation;
  }

  /** Records are written answered (answeredRecord): the write and the answer go together in this process. */
  async markAnswered(): Promise<void> {}

  async putSandboxIf(rec: SandboxRecord, generation: number): Promise<number> {
    rec = answeredRecord(rec);
    const row =
      generation === 0
        ? this.q(
            'INSERT INTO sandboxes (id, state, node_id, template_id, record, generation) SELECT ?, ?, ?, ?, ?, 1 WHERE NOT EXISTS (SELECT 1 FROM deleted_sandboxes WHERE id = ?) ON CONFLICT(id) DO NOTHING RETURNING generation',
          ).get(rec.sandboxID, rec.state, rec.nodeID, rec.templateID, recordJson(rec), rec.sandboxID)
        : this.q(
            'UPDATE sandboxes SET state=?, node_id=?, template_id=?, record=?, generation=generation+1 WHERE id=? AND generation=? RETURNING generation',
          ).get(rec.state, rec.nodeID, rec.templateID, recordJson(rec), rec.sandboxID, generation);
    return (row as { generation: number } | undefined)?.generation ?? 0;
  }

  async deleteSandboxIf(sandboxID: string, generation: number): Promise<boolean> {
    return this.d.transaction(() => {
      if (this.q('DELETE FROM sandboxes WHERE id = ? AND generation = ?').run(sandboxID, generation).changes === 0) return false;
      this.remember(sandboxID);
      return true;
    })();
  }

  /** A tombstone: wasDeleted answers from it, and putSandboxIf(…, 0) refuses the id. */
  private remember(sandboxID: string): void {
    this.q('INSERT OR REPLACE INTO deleted_sandboxes (id, at) VALUES (?, ?)').run(sandboxID, Date.now());
    this.keys.forget(sandboxID);
  }

  async getSandboxForWrite(sandboxID: string): Promise<SandboxRecord | undefined> {
    return this.getSandbox(sandboxID);
  }

  async wasDeleted(sandboxID: string): Promise<boolean> {
    return this.q('SELECT 1 FROM deleted_sandboxes WHERE id = ? AND NOT EXISTS (SELECT 1 FROM sandboxes WHERE id = ?)').get(sandboxID, sandboxID) !== undefined;
  }

  async markNodeSandboxes(nodeID: string, state: SandboxState, reason: string): Promise<SandboxRecord[]> {
    const marked: SandboxRecord[] = [];
    for (const rec of await this.listSandboxes({ nodeID })) {
      if (rec.state !== state && (await this.putSandboxIf({ ...rec, state, reason }, rec.generation ?? 0)) > 0) marked.push({ ...rec, state, reason });
    }
    return marked;
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
    return row ? { ...parseRecord(row.record), generation: row.generation } : undefined;
  }

  async listSandboxes(filter?: ListFilter): Promise<SandboxRecord[]> {
    const rows = this.q('SELECT record, generation FROM sandboxes ORDER BY rowid').all() as { record: string; generation: number }[];
    return rows.map((r) => ({ ...parseRecord(r.record), generation: r.generation })).filter((r) => matchesFilter(r, filter));
  }

  async deleteSandbox(sandboxID: string): Promise<void> {
    this.d.transaction(() => {
      if (this.q('DELETE FROM sandboxes WHERE id = ?').run(sandboxID).changes > 0) this.remember(sandboxID);
    })();
  }

  async appendEvent(e: Omit<EventView, 'id'>): Promise<EventView> {
    const d = this.d;
    const id = d.transaction(() => {
      // The at column keeps ISO 8601, as in the rows before numeric times (the body is what is read).
      const flood = isFloodKind(e.kind) ? 1 : 0;
      const info = this.q('INSERT INTO events (at, body, flood) VALUES (?, ?, ?)').run(isoTime(e.at), JSON.stringify(e), flood);
      // Each kind's class keeps its newest `retention`: a flood pushes out only its own kind's.
      this.q('DELETE FROM events WHERE flood = ? AND id <= (SELECT id FROM events WHERE flood = ? ORDER BY id DESC LIMIT 1 OFFSET ?)').run(
        flood,
        flood,
        this.retention,
      );
      return Number(info.lastInsertRowid);
    })();
    return { ...e, id };
  }

  async appendNodeEvent(e: Omit<EventView, 'id'>, origin: { sender: string; seq: number }): Promise<EventView | undefined> {
    if (origin.seq <= (this.senders.get(origin.sender) ?? 0)) return undefined;
    const event = await this.appendEvent(e);
    this.senders.set(origin.sender, origin.seq);
    return event;
  }

  async listEvents(opts: { sinceID?: number; beforeID?: number; limit?: number } = {}): Promise<EventView[]> {
    const limit = Math.max(1, Math.min(opts.limit ?? 100, 10_000));
    const rows =
      opts.sinceID !== undefined
        ? (this.q('SELECT id, body FROM events WHERE id > ? ORDER BY id LIMIT ?').all(opts.sinceID, limit) as { id: number; body: string }[])
        : (this.q('SELECT id, body FROM (SELECT id, body FROM events WHERE id < ? ORDER BY id DESC LIMIT ?) ORDER BY id').all(
            opts.beforeID ?? Number.MAX_SAFE_INTEGER,
            limit,
          ) as { id: number; body: string }[]);
    return rows.map((r) => ({ ...eventWithEpochTime(JSON.parse(r.body) as Omit<EventView, 'id'>), id: r.id }));
  }

  /** Appending wrote it to the file already. */
  async archiveEvents(): Promise<void> {}

  async putConfigVersion(rec: ConfigVersionRecord): Promise<void> {
    this.q('INSERT OR REPLACE INTO config_versions (version, at, actor, reason, master, cubelet) VALUES (?, ?, ?, ?, ?, ?)').run(
      rec.version,
      rec.at,
      rec.actor,
      rec.reason,
      JSON.stringify(rec.master),
      JSON.stringify(rec.cubelet),
    );
  }

  async configHead(): Promise<ConfigVersionRecord | undefined> {
    const r = this.q('SELECT version, at, actor, reason, master, cubelet FROM config_head WHERE id = 1').get() as ConfigRow | undefined;
    return r ? configRecord(r) : undefined;
  }

  async casConfigHead(rec: ConfigVersionRecord, expected: number): Promise<boolean> {
    const args = [rec.version, rec.at, rec.actor, rec.reason, JSON.stringify(rec.master), JSON.stringify(rec.cubelet)];
    return this.d.transaction(() => {
      const r =
        expected === 0
          ? this.q('INSERT OR IGNORE INTO config_head (id, version, at, actor, reason, master, cubelet) VALUES (1, ?, ?, ?, ?, ?, ?)').run(...args)
          : this.q('UPDATE config_head SET version = ?, at = ?, actor = ?, reason = ?, master = ?, cubelet = ? WHERE id = 1 AND version = ?').run(
              ...args,
              expected,
            );
      if (r.changes !== 1) return false;
      this.q('INSERT OR REPLACE INTO config_versions (version, at, actor, reason, master, cubelet) VALUES (?, ?, ?, ?, ?, ?)').run(...args);
      return true;
    })();
  }

  async latestConfigVersion(): Promise<ConfigVersionRecord | undefined> {
    return (await this.listConfigVersions(1))[0];
  }

  async listConfigVersions(limit = 20): Promise<ConfigVersionRecord[]> {
    return (this.q('SELECT * FROM config_versions ORDER BY version DESC LIMIT ?').all(limit) as ConfigRow[]).map(configRecord);
  }

  async appendAudit(rec: Omit<AuditRecord, 'id' | 'actorName'>): Promise<AuditRecord> {
    const row = this.q(
      'INSERT INTO audit (at, actor, actor_name, action, target, outcome, detail) VALUES (?, ?, (SELECT name FROM api_keys WHERE id = ?), ?, ?, ?, ?) RETURNING id, actor_name',
    ).get(rec.at, rec.actor, rec.actor, rec.action, rec.target, rec.outcome, rec.detail === undefined ? null : JSON.stringify(rec.detail)) as {
      id: number;
      actor_name: string | null;
    };
    return { ...rec, id: row.id, ...(row.actor_name !== null ? { actorName: row.actor_name } : {}) };
  }

  async listAudit(opts: { limit?: number; actor?: string } = {}): Promise<AuditRecord[]> {
    const limit = opts.limit ?? 100;
    const rows = (
      opts.actor !== undefined
        ? this.q('SELECT * FROM audit WHERE actor = ? ORDER BY id DESC LIMIT ?').all(opts.actor, limit)
        : this.q('SELECT * FROM audit ORDER BY id DESC LIMIT ?').all(limit)
    ) as (Omit<AuditRecord, 'detail' | 'actorName'> & { detail: string | null; actor_name: string | null })[];
    return rows.map(({ detail, actor_name, ...r }) => ({
      ...r,
      ...(actor_name !== null ? { actorName: actor_name } : {}),
      ...(detail !== null ? { detail: JSON.parse(detail) as Record<string, unknown> } : {}),
    }));
  }

  async putNode(rec: NodeRecord): Promise<void> {
    this.q('INSERT OR REPLACE INTO nodes (node_id, record) VALUES (?, ?)').run(rec.nodeID, JSON.stringify(rec));
  }

  async getNode(nodeID: string): Promise<NodeRecord | undefined> {
    const row = this.q('SELECT record FROM nodes WHERE node_id = ?').get(nodeID) as { record: string } | undefined;
    return row ? parseNodeRecord(row.record) : undefined;
  }

  async listNodes(): Promise<NodeRecord[]> {
    return (this.q('SELECT record FROM nodes ORDER BY node_id').all() as { record: string }[]).map((r) => parseNodeRecord(r.record));
  }

  async deleteNode(nodeID: string): Promise<void> {
    this.d.transaction(() => {
      this.q('DELETE FROM nodes WHERE node_id = ?').run(nodeID);
      this.q('DELETE FROM node_templates WHERE node_id = ?').run(nodeID);
    })();
    this.metrics.delete(nodeID);
    this.lost.delete(nodeID);
    this.creating.delete(nodeID);
  }

  async setNodeTemplates(nodeID: string, templateIDs: string[]): Promise<void> {
    this.d.transaction(() => {
      this.q('DELETE FROM node_templates WHERE node_id = ?').run(nodeID);
      for (const t of templateIDs) this.q('INSERT OR IGNORE INTO node_templates (template_id, node_id) VALUES (?, ?)').run(t, nodeID);
    })();
  }

  async listTemplates(): Promise<{ templateID: string; nodes: string[] }[]> {
    const by = new Map<string, string[]>();
    for (const r of this.q('SELECT template_id, node_id FROM node_templates ORDER BY template_id, node_id').all() as {
      template_id: string;
      node_id: string;
    }[]) {
      by.set(r.template_id, [...(by.get(r.template_id) ?? []), r.node_id]);
    }
    return [...by].map(([templateID, nodes]) => ({ templateID, nodes }));
  }

  // --- live state (memory)

  async putNodeMetrics(views: NodeView[], ttlMs: number): Promise<void> {
    const until = Date.now() + ttlMs;
    for (const view of views) this.metrics.set(view.nodeID, { view, until });
  }

  async touchNodeMetrics(seen: { nodeID: string; lastSeen: number }[], ttlMs: number): Promise<string[]> {
    const now = Date.now();
    const missing: string[] = [];
    for (const { nodeID, lastSeen } of seen) {
      const m = this.metrics.get(nodeID);
      if (!m || m.until <= now) missing.push(nodeID);
      else this.metrics.set(nodeID, { view: m.view.lastSeen >= lastSeen ? m.view : { ...m.view, lastSeen }, until: now + ttlMs });
    }
    return missing;
  }

  async getNodeMetrics(nodeIDs: string[]): Promise<Map<string, NodeView>> {
    const now = Date.now();
    const out = new Map<string, NodeView>();
    for (const id of nodeIDs) {
      const m = this.metrics.get(id);
      if (m && m.until > now) out.set(id, m.view);
    }
    return out;
  }

  async markNodeLost(nodeID: string): Promise<boolean> {
    if (this.lost.has(nodeID)) return false;
    this.lost.add(nodeID);
    return true;
  }

  async clearNodeLost(nodeID: string): Promise<void> {
    this.lost.delete(nodeID);
  }

  async lostNodes(nodeIDs: string[]): Promise<Set<string>> {
    return new Set(nodeIDs.filter((id) => this.lost.has(id)));
  }

  async incInFlight(nodeID: string): Promise<number> {
    const n = (this.creating.get(nodeID) ?? 0) + 1;
    this.creating.set(nodeID, n);
    return n;
  }

  async decInFlight(nodeID: string): Promise<void> {
    const n = (this.creating.get(nodeID) ?? 0) - 1;
    if (n > 0) this.creating.set(nodeID, n);
    else this.creating.delete(nodeID);
  }

  async inFlight(): Promise<Map<string, number>> {
    return new Map(this.creating);
  }

  async acquireLock(sandboxID: string, ttlMs: number): Promise<string | undefined> {
    const now = Date.now();
    const held = this.locks.get(sandboxID);
    if (held && held.until > now) return undefined;
    const token = String(++this.fence);
    this.locks.set(sandboxID, { token, until: now + ttlMs });
    return token;
  }

  async renewLock(sandboxID: string, token: string, ttlMs: number): Promise<boolean> {
    const held = this.locks.get(sandboxID);
    if (!held || held.token !== token || held.until <= Date.now()) return false;
    held.until = Date.now() + ttlMs;
    return true;
  }

  async releaseLock(sandboxID: string, token: string): Promise<boolean> {
    const held = this.locks.get(sandboxID);
    if (!held || held.token !== token || held.until <= Date.now()) return false;
    this.locks.delete(sandboxID);
    return true;
  }

  async holdLease(name: string, holder: string, ttlMs: number): Promise<boolean> {
    const now = Date.now();
    const cur = this.leases.get(name);
    if (cur && cur.holder !== holder && cur.until > now) return false;
    this.leases.set(name, { holder, until: now + ttlMs });
    return true;
  }

  async putApiKey(rec: ApiKeyRecord): Promise<boolean> {
    return this.keys.put(rec);
  }

  async getApiKey(id: string): Promise<ApiKeyRecord | undefined> {
    return this.keys.get(id);
  }

  async apiKeyByHash(hash: string): Promise<ApiKeyRecord | undefined> {
    return this.keys.byHash(hash);
  }

  async listApiKeys(): Promise<ApiKeyRecord[]> {
    return this.keys.list();
  }

  async updateApiKey(id: string, patch: ApiKeyPatch): Promise<ApiKeyRecord | undefined> {
    return this.keys.update(id, patch);
  }

  async deleteApiKey(id: string): Promise<boolean> {
    return this.keys.remove(id);
  }

  async claimQuota(claim: QuotaClaim): Promise<QuotaRefusal | undefined> {
    return this.keys.claim(claim);
  }

  async releaseQuota(owner: string, sandboxID: string): Promise<void> {
    this.keys.release(owner, sandboxID);
  }

  async quotaUsage(owners: string[]): Promise<Map<string, KeyUsage>> {
    return new Map(owners.map((o) => [o, this.keys.usage(o)]));
  }

  async claimCreateKey(rec: CreateKeyRecord, over?: string): Promise<CreateKeyRecord> {
    const now = Date.now();
    const open = rec.outcome === undefined || 'failed' in rec.outcome ? 1 : 0;
    const outcome = rec.outcome === undefined ? null : JSON.stringify(rec.outcome);
    this.d.transaction(() => {
      this.q('DELETE FROM create_keys WHERE k = ? AND expires_at <= ?').run(rec.key, now);
      if (
        this.q('INSERT OR IGNORE INTO create_keys (k, sandbox_id, deadline, expires_at, outcome, open) VALUES (?, ?, ?, ?, ?, ?)').run(
          rec.key,
          rec.sandboxID,
          rec.deadline,
          rec.expiresAt,
          outcome,
          open,
        ).changes === 1
      )
        return;
      if (over !== undefined)
        this.q('UPDATE create_keys SET sandbox_id = ?, deadline = ?, expires_at = ?, outcome = ?, open = ? WHERE k = ? AND sandbox_id = ? AND open = 1').run(
          rec.sandboxID,
          rec.deadline,
          rec.expiresAt,
          outcome,
          open,
          rec.key,
          over,
        );
    })();
    if (++this.claims % 1000 === 0) this.q('DELETE FROM create_keys WHERE expires_at <= ?').run(now);
    return (await this.getCreateKey(rec.key)) ?? rec;
  }

  async getCreateKey(key: string): Promise<CreateKeyRecord | undefined> {
    const row = this.q('SELECT k, sandbox_id, deadline, expires_at, outcome FROM create_keys WHERE k = ? AND expires_at > ?').get(key, Date.now()) as
      CreateKeyRow | undefined;
    return row && createKeyRow(row);
  }

  async settleCreateKey(key: string, sandboxID: string, outcome: NonNullable<CreateKeyRecord['outcome']>): Promise<boolean> {
    return (
      this.q('UPDATE create_keys SET outcome = ?, open = ? WHERE k = ? AND sandbox_id = ?').run(
        JSON.stringify(outcome),
        'failed' in outcome ? 1 : 0,
        key,
        sandboxID,
      ).changes === 1
    );
  }

  async putSnapshot(rec: SnapshotRecord): Promise<void> {
    // created_at keeps ISO 8601, as in the rows before numeric times: they sort together.
    this.q('INSERT OR REPLACE INTO snapshots (id, node_id, created_at, record) VALUES (?, ?, ?, ?)').run(
      rec.snapshotID,
      rec.nodeID,
      isoTime(rec.createdAt),
      JSON.stringify(rec),
    );
  }

  async getSnapshot(snapshotID: string): Promise<SnapshotRecord | undefined> {
    const row = this.q('SELECT record FROM snapshots WHERE id = ?').get(snapshotID) as { record: string } | undefined;
    return row ? snapshotWithEpochTime(JSON.parse(row.record) as SnapshotRecord) : undefined;
  }

  async listSnapshots(): Promise<SnapshotRecord[]> {
    return (this.q('SELECT record FROM snapshots ORDER BY created_at, id').all() as { record: string }[]).map((r) =>
      snapshotWithEpochTime(JSON.parse(r.record) as SnapshotRecord),
    );
  }

  async deleteSnapshot(snapshotID: string): Promise<boolean> {
    return this.q('DELETE FROM snapshots WHERE id = ?').run(snapshotID).changes > 0;
  }

  async addVolume(rec: VolumeRecord): Promise<boolean> {
    const r = this.q('INSERT OR IGNORE INTO volumes (id, owner, name, created_at, record) VALUES (?, ?, ?, ?, ?)').run(
      rec.volumeID,
      rec.owner ?? '',
      rec.name,
      rec.createdAt,
      JSON.stringify(rec),
    );
    return r.changes === 1;
  }

  async getVolume(volumeID: string): Promise<VolumeRecord | undefined> {
    const row = this.q('SELECT record FROM volumes WHERE id = ?').get(volumeID) as { record: string } | undefined;
    return row ? (JSON.parse(row.record) as VolumeRecord) : undefined;
  }

  async listVolumes(): Promise<VolumeRecord[]> {
    return (this.q('SELECT record FROM volumes ORDER BY created_at, id').all() as { record: string }[]).map((r) => JSON.parse(r.record) as VolumeRecord);
  }

  async deleteVolume(volumeID: string): Promise<boolean> {
    return this.q('DELETE FROM volumes WHERE id = ?').run(volumeID).changes > 0;
  }
}

interface ConfigRow {
  version: number;
  at: string;
  actor: string;
  reason: string;
  master: string;
  cubelet: string;
}

function configRecord(r: ConfigRow): ConfigVersionRecord {
  return { version: r.version, at: r.at, actor: r.actor, reason: r.reason, master: JSON.parse(r.master), cubelet: JSON.parse(r.cubelet) };
}
