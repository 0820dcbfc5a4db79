// API keys as the control plane keeps them (control/keys.ts) over the embedded store: the first
// admin key migrated from the startup key, keys made, changed and removed with an audit row each,
// the last admin key kept, and quotas claimed and refused naming the quota.
import { createHash } from 'node:crypto';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { MasterConfigSchema, type MasterConfig } from '../../src/config/schema.js';
import { KeyBook, keyID } from '../../src/control/keys.js';
import { CubeError } from '../../src/errors.js';
import { EmbeddedStore } from '../../src/store/embedded.js';
import { sandboxRecord } from '../store/contract.js';

let store: EmbeddedStore;
let master: MasterConfig;
let book: KeyBook;
const STARTUP = 'e2b_0123456789abcdef0123456789abcdef01234567';

beforeEach(async () => {
  store = new EmbeddedStore({ path: ':memory:' });
  await store.init();
  master = MasterConfigSchema.parse({});
  book = new KeyBook(store, () => master);
});

afterEach(async () => {
  await store.close();
});

const refusal = (p: Promise<unknown>) =>
  p.then(
    () => undefined,
    (e: unknown) => e as CubeError,
  );

describe('API keys', () => {
  it('makes the startup key the first admin key while the store holds none, and only then', async () => {
    expect(await book.authenticate(STARTUP)).toBeUndefined();
    expect(await book.bootstrap(STARTUP)).toBe('migrated');
    expect(await book.authenticate(STARTUP)).toMatchObject({ id: keyID(STARTUP), name: 'admin', role: 'admin', createdBy: 'system' });
    expect(await book.bootstrap(STARTUP)).toBe('present');
    // A replica started with another key once keys exist: it is not added behind the operators' back.
    expect(await book.bootstrap('e2b_other')).toBe('not-a-key');
    expect(await book.authenticate('e2b_other')).toBeUndefined();
  });

  it('creates a key shown once and stored as its SHA-256, audited with the acting key and its name', async () => {
    await book.bootstrap(STARTUP);
    const admin = keyID(STARTUP);
    const { key, record } = await book.create({ name: 'rl-team', role: 'user', quotas: { sandboxes: 20 } }, admin);
    expect(key).toMatch(/^e2b_[0-9a-f]{40}$/);
    expect(record).toMatchObject({
      id: keyID(key),
      name: 'rl-team',
      role: 'user',
      quotas: { sandboxes: 20 },
      createdBy: admin,
      usage: { sandboxes: 0, vcpus: 0, memoryMiB: 0 },
    });
    expect(record.limits).toEqual({ sandboxes: 20, vcpus: 0, memory_mib: 0, creates_per_sec: 0 });
    expect(JSON.stringify(record)).not.toContain(key);
    expect((await store.getApiKey(record.id))?.hash).toBe(createHash('sha256').update(key).digest('hex'));
    expect(JSON.stringify(await store.listApiKeys())).not.toContain(key);
    expect(await book.authenticate(key)).toMatchObject({ name: 'rl-team', role: 'user' });
    const [row] = await store.listAudit({ limit: 1 });
    expect(row).toMatchObject({ actor: admin, actorName: 'admin', action: 'key.create', target: record.id, outcome: 'ok' });
    // Names are unique; bad names, roles and quotas are 400s.
    expect(await refusal(book.create({ name: 'rl-team', role: 'user' }, admin))).toMatchObject({ kind: 'CONFLICT' });
    expect(await refusal(book.create({ name: 'has space', role: 'user' }, admin))).toMatchObject({ kind: 'BAD_REQUEST' });
    expect(await refusal(book.create({ name: 'x', role: 'root' as 'user' }, admin))).toMatchObject({ kind: 'BAD_REQUEST' });
    expect(await refusal(book.create({ name: 'y', role: 'user', quotas: { sandboxes: 1.5 } }, admin))).toMatchObject({ kind: 'BAD_REQUEST' });
  });

  it('keeps an admin key: the last one can be neither removed nor made a user key', async () => {
    await book.bootstrap(STARTUP);
    const admin = keyID(STARTUP);
    expect(await refusal(book.remove('admin', admin))).toMatchObject({ kind: 'CONFLICT', message: expect.stringMatching(/last admin key/) });
    expect(await refusal(book.update(admin, { role: 'user' }, admin))).toMatchObject({ kind: 'CONFLICT' });
    const { key } = await book.create({ name: 'ops2', role: 'admin' }, admin);
    await book.update('admin', { role: 'user' }, keyID(key));
    expect(await book.authenticate(STARTUP)).toMatchObject({ role: 'user' });
    await book.remove('admin', keyID(key));
    // Removed: refused at once on this replica (its cache forgets it).
    expect(await book.authenticate(STARTUP)).toBeUndefined();
    expect((await store.listAudit({ limit: 3 })).map((r) => `${r.action} ${r.outcome === 'ok' ? 'ok' : 'refused'}`)).toEqual([
      'key.rm ok',
      'key.set ok',
      'key.create ok',
    ]);
    expect(await refusal(book.remove('nope', keyID(key)))).toMatchObject({ kind: 'NOT_FOUND' });
  });

  it('claims a create against the quota in force: refused at once with 429 naming the quota, released when the create fails', async () => {
    await book.bootstrap(STARTUP);
    const { record } = await book.create({ name: 'small', role: 'user', quotas: { vcpus: 2 } }, keyID(STARTUP));
    const spec = { cpus: 1, memoryMiB: 256 };
    expect(await book.claimed(record.id, 's1', spec, async () => 'made')).toBe('made');
    await store.putSandbox(sandboxRecord('s1', { owner: record.id, spec: { ...spec, diskGiB: 1 } }));
    // A failed create gives its claim back.
    await expect(book.claimed(record.id, 's2', spec, () => Promise.reject(new Error('node said no')))).rejects.toThrow('node said no');
    expect(await book.claimed(record.id, 's3', spec, async () => 'made')).toBe('made');
    const e = (await refusal(book.claimed(record.id, 's4', spec, async () => 'made')))!;
    expect(e).toMatchObject({ kind: 'QUOTA_EXCEEDED', http: 429, code: 130481, retryAfter: 1, details: { quota: 'vcpus', used: 2, limit: 2 } });
    expect(e.message).toBe(`API key "small" (${record.id}) is at its vcpus quota: 2 in use, at most 2 (cubectl key set small --vcpus N)`);
    // The default sandboxes quota follows the config.
    master = MasterConfigSchema.parse({ api: { max_sandboxes_per_key: 2 } });
    await book.update('small', { quotas: { vcpus: null } }, keyID(STARTUP));
    expect((await refusal(book.claimed(record.id, 's5', spec, async () => 'made')))!.message).toMatch(
      /sandboxes quota: 2 running or starting, at most 2 \(api\.max_sandboxes_per_key, the default; cubectl key set small --sandboxes N\)/,
    );
    expect((await book.get('small')).usage).toEqual({ sandboxes: 2, vcpus: 2, memoryMiB: 512 });
    // A fork of 1 would pass it: refused whole.
    expect(await refusal(book.assertRoomFor(record.id, 1))).toMatchObject({ kind: 'QUOTA_EXCEEDED', details: { quota: 'sandboxes' } });
  });
});
