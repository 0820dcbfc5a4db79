import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect, it } from 'vitest';
import Database from 'better-sqlite3';
import { HOLDING_STATES, milliCpus } from '../../src/model/api-key.js';
import { EmbeddedStore } from '../../src/store/embedded.js';
import {
  EPOCH_EVENT_AT,
  EPOCH_NODE,
  EPOCH_TIMES,
  LEGACY_EVENT_BODY,
  LEGACY_NODE_JSON,
  LEGACY_SNAPSHOT,
  legacyRecordJson,
  sandboxRecord,
  snapshotRecord,
  storeContract,
} from './contract.js';

storeContract('embedded (SQLite)', async ({ eventRetention }) => {
  const dir = mkdtempSync(join(tmpdir(), 'cubed-test-store-'));
  const store = new EmbeddedStore({ path: join(dir, 'cubed.db'), eventRetention });
  await store.init();
  return { store, cleanup: async () => rmSync(dir, { recursive: true, force: true }) };
});

it('migrations run idempotently and records survive a reopen', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'cubed-test-store-'));
  try {
    const path = join(dir, 'cubed.db');
    const a = new EmbeddedStore({ path });
    await a.init();
    await a.putSandbox(sandboxRecord('keep'));
    await a.close();
    const b = new EmbeddedStore({ path });
    await b.init();
    expect((await b.getSandbox('keep'))?.sandboxID).toBe('keep');
    await b.close();
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

it('a record an older version wrote (ISO 8601 times in its JSON) loads with epoch ms times', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'cubed-test-store-'));
  try {
    const path = join(dir, 'cubed.db');
    const a = new EmbeddedStore({ path });
    await a.init();
    await a.putSandbox(sandboxRecord('old'));
    await a.close();
    const db = new Database(path);
    db.prepare('UPDATE sandboxes SET record = ? WHERE id = ?').run(legacyRecordJson('old'), 'old');
    db.close();
    const b = new EmbeddedStore({ path });
    await b.init();
    expect(await b.getSandbox('old')).toMatchObject({ sandboxID: 'old', ...EPOCH_TIMES });
    expect(await b.listSandboxes()).toMatchObject([EPOCH_TIMES]);
    // Written back (a state change), it is stored with numbers.
    expect(await b.updateSandboxState('old', 'paused')).toBe(true);
    expect(JSON.parse((new Database(path, { readonly: true }).prepare('SELECT record FROM sandboxes').get() as { record: string }).record)).toMatchObject(
      EPOCH_TIMES,
    );
    await b.close();
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

it('a node record, an event and a snapshot an older version wrote (ISO 8601 times) load with epoch ms times', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'cubed-test-store-'));
  try {
    const path = join(dir, 'cubed.db');
    const a = new EmbeddedStore({ path });
    await a.init();
    await a.close();
    const db = new Database(path);
    db.prepare('INSERT INTO nodes (node_id, record) VALUES (?, ?)').run('n1', LEGACY_NODE_JSON);
    db.prepare('INSERT INTO events (at, body) VALUES (?, ?)').run('2026-01-01T00:00:07.000Z', LEGACY_EVENT_BODY);
    db.prepare('INSERT INTO snapshots (id, node_id, created_at, record) VALUES (?, ?, ?, ?)').run(
      LEGACY_SNAPSHOT.id,
      'node-a',
      LEGACY_SNAPSHOT.createdAt,
      LEGACY_SNAPSHOT.json,
    );
    db.close();
    const b = new EmbeddedStore({ path });
    await b.init();
    expect(await b.getNode('n1')).toEqual(EPOCH_NODE);
    expect(await b.listNodes()).toEqual([EPOCH_NODE]);
    expect((await b.listEvents()).map((e) => [e.message, e.at])).toEqual([['old', EPOCH_EVENT_AT]]);
    // A snapshot taken since sorts after the older one (created_at), both with numbers.
    await b.putSnapshot(snapshotRecord('snap-new', Date.parse(LEGACY_SNAPSHOT.createdAt) + 1));
    expect(await b.getSnapshot(LEGACY_SNAPSHOT.id)).toEqual(snapshotRecord(LEGACY_SNAPSHOT.id, Date.parse(LEGACY_SNAPSHOT.createdAt)));
    expect((await b.listSnapshots()).map((x) => [x.snapshotID, x.createdAt])).toEqual([
      [LEGACY_SNAPSHOT.id, Date.parse(LEGACY_SNAPSHOT.createdAt)],
      ['snap-new', Date.parse(LEGACY_SNAPSHOT.createdAt) + 1],
    ]);
    await b.close();
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

it('a reopened store remembers deletes and hands out fencing tokens above the ones before', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'cubed-test-store-'));
  try {
    const path = join(dir, 'cubed.db');
    const a = new EmbeddedStore({ path });
    await a.init();
    await a.putSandbox(sandboxRecord('gone'));
    await a.deleteSandbox('gone');
    const before = Number(await a.acquireLock('s', 60_000));
    await a.close();
    const b = new EmbeddedStore({ path });
    await b.init();
    expect(await b.wasDeleted('gone')).toBe(true);
    // The lock itself was live state (memory) and went with the process; its fence number must not come back lower.
    expect(Number(await b.acquireLock('s', 60_000))).toBeGreaterThan(before);
    await b.close();
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

it('a database of the version before API keys: migrated in place, its sandboxes counted against their owners', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'cubed-test-store-'));
  try {
    const path = join(dir, 'cubed.db');
    const a = new EmbeddedStore({ path });
    await a.init();
    await a.putSandbox(sandboxRecord('mine', { owner: 'key-0000abcd' }));
    await a.appendAudit({ at: 't', actor: 'key-0000abcd', action: 'sandbox.create', target: 'mine', outcome: 'ok' });
    await a.close();
    // What that version left: four migrations, no keys table, no owner column, no actor_name (and none
    // of the lifecycle tables and event classes that came after).
    const db = new Database(path);
    db.exec(
      'DROP INDEX sandboxes_owner_use; ALTER TABLE sandboxes DROP COLUMN mem_mib; ALTER TABLE sandboxes DROP COLUMN mcpu; ALTER TABLE sandboxes DROP COLUMN owner; DROP TABLE api_keys; ALTER TABLE audit DROP COLUMN actor_name; PRAGMA user_version = 4;',
    );
    for (const t of ['tombstones', 'lifecycle_events', 'webhooks', 'webhook_deliveries', 'cursors', 'ended_sandboxes', 'create_keys'])
      db.exec(`DROP TABLE ${t}`);
    db.exec('DROP INDEX events_flood; ALTER TABLE events DROP COLUMN flood; DROP TABLE volumes;');
    db.close();
    const b = new EmbeddedStore({ path });
    await b.init();
    expect((await b.quotaUsage(['key-0000abcd'])).get('key-0000abcd')).toEqual({ sandboxes: 1, vcpus: 1, memoryMiB: 256 });
    expect(await b.listAudit()).toMatchObject([{ actor: 'key-0000abcd', action: 'sandbox.create' }]);
    expect(await b.listApiKeys()).toEqual([]);
    await b.close();
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

it("sums a key's use from the owner index (no record parsed), equal to the records' own sum, fractional cpus rounded as milliCpus", async () => {
  const dir = mkdtempSync(join(tmpdir(), 'cubed-test-store-'));
  try {
    const path = join(dir, 'cubed.db');
    const s = new EmbeddedStore({ path });
    await s.init();
    const states = ['creating', 'running', 'paused', 'resuming', 'pausing', 'destroying', 'error'] as const;
    const cpus = [0.25, 0.5, 1, 1.5, 2.0004, 0.1];
    const owners = ['key-a', 'key-b', undefined];
    const want = new Map<string, { sandboxes: number; mcpu: number; memoryMiB: number }>();
    for (let i = 0; i < 300; i++) {
      const owner = owners[i % 3];
      const state = states[(i * 7) % states.length]!;
      const spec = { cpus: cpus[i % cpus.length]!, memoryMiB: 128 * (1 + (i % 5)), diskGiB: 1 };
      await s.putSandbox(sandboxRecord(`s${i}`, { state, spec, ...(owner ? { owner } : {}) }));
      if (!owner || !HOLDING_STATES.includes(state)) continue;
      const w = want.get(owner) ?? { sandboxes: 0, mcpu: 0, memoryMiB: 0 };
      w.sandboxes++;
      w.mcpu += milliCpus(spec.cpus);
      w.memoryMiB += spec.memoryMiB;
      want.set(owner, w);
    }
    const got = await s.quotaUsage(['key-a', 'key-b', 'key-c']);
    for (const k of ['key-a', 'key-b'])
      expect(got.get(k)).toEqual({ sandboxes: want.get(k)!.sandboxes, vcpus: want.get(k)!.mcpu / 1000, memoryMiB: want.get(k)!.memoryMiB });
    expect(got.get('key-c')).toEqual({ sandboxes: 0, vcpus: 0, memoryMiB: 0 });
    await s.close();
    const db = new Database(path, { readonly: true });
    const plan = db
      .prepare(`EXPLAIN QUERY PLAN SELECT COUNT(*), TOTAL(mcpu), TOTAL(mem_mib) FROM sandboxes WHERE owner = ? AND state IN ('running')`)
      .all('key-a') as { detail: string }[];
    db.close();
    expect(plan.map((r) => r.detail).join(' ')).toContain('USING INDEX sandboxes_owner_use');
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
