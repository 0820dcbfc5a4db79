import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect, it } from 'vitest';
import Database from 'better-sqlite3';
import { EmbeddedStore } from '../../src/store/embedded.js';
import { EPOCH_NODE, EPOCH_TIMES, LEGACY_NODE_JSON, legacyRecordJson, sandboxRecord, storeContract } from './contract.js';

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
    expect(JSON.parse((new Database(path, { readonly: true }).prepare('SELECT record FROM sandboxes').get() as { record: string }).record)).toMatchObject(EPOCH_TIMES);
    await b.close();
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

it('a node record an older version wrote (ISO 8601 joinedAt, evictAt) loads with epoch ms times', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'cubed-test-store-'));
  try {
    const path = join(dir, 'cubed.db');
    const a = new EmbeddedStore({ path });
    await a.init();
    await a.close();
    const db = new Database(path);
    db.prepare('INSERT INTO nodes (node_id, record) VALUES (?, ?)').run('n1', LEGACY_NODE_JSON);
    db.close();
    const b = new EmbeddedStore({ path });
    await b.init();
    expect(await b.getNode('n1')).toEqual(EPOCH_NODE);
    expect(await b.listNodes()).toEqual([EPOCH_NODE]);
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
