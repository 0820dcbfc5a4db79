// API keys on a real cubed, through the real `e2b` SDK and the built cubectl: the startup key is
// the first admin key; a user key runs sandboxes but gets 403 from the admin API and node-wide
// policy; quotas answer 429 with Retry-After naming the quota, at once; every admin change is in
// the audit trail with its key's id and name; `cubectl key` manages them.
import { RateLimitError, Sandbox } from 'e2b';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { AuditView, KeyView, NewKeyView } from '../../src/api/types.js';
import { call, startDaemon, type TestDaemon } from '../helpers/daemon.js';
import { assertBuilt, cubectl } from '../cli/run-cli.js';

let d: TestDaemon;
let env: Record<string, string>;
const created = new Set<string>();

const admin = (method: string, path: string, body?: unknown) => call(d, method, path, body);
const as = (key: string, method: string, path: string, body?: unknown) => call(d, method, path, body, { 'x-api-key': key });
const sdk = (key: string) => ({ apiKey: key, apiUrl: d.url, sandboxUrl: d.url });

async function newKey(name: string, body: Record<string, unknown> = {}): Promise<NewKeyView> {
  const r = await admin('POST', '/admin/v1/keys', { name, ...body });
  expect(r.status).toBe(201);
  return r.json as NewKeyView;
}

async function create(key: string): Promise<Sandbox> {
  const s = await Sandbox.create({ ...sdk(key), timeoutMs: 300_000 });
  created.add(s.sandboxId);
  return s;
}

async function killAll(): Promise<void> {
  await Promise.all([...created].map((id) => admin('DELETE', `/admin/v1/sandboxes/${id}`).then(() => created.delete(id))));
}

beforeAll(async () => {
  assertBuilt();
  d = await startDaemon();
  env = { CUBE_API_URL: d.url, CUBE_API_KEY: d.apiKey };
});

afterAll(async () => {
  if (!d) return;
  try {
    await killAll();
  } finally {
    await d.stop();
  }
});

describe('API keys with roles and quotas', () => {
  it('the startup key is the first admin key, listed without the key or its hash', async () => {
    const r = await admin('GET', '/admin/v1/keys');
    expect(r.status).toBe(200);
    const [first] = r.json as KeyView[];
    expect(first).toMatchObject({ name: 'admin', role: 'admin', createdBy: 'system' });
    expect(r.text).not.toContain(d.apiKey);
    expect(r.text).not.toContain('hash');
  });

  it('a user key runs sandboxes through the E2B API and is refused the admin API and node-wide policy (403)', async () => {
    const user = await newKey('user-a');
    expect(user.key).toMatch(/^e2b_[0-9a-f]{40}$/);
    expect(user.role).toBe('user');
    const s = await create(user.key);
    expect((await s.commands.run('echo ok')).stdout).toBe('ok\n');
    expect((await Sandbox.list(sdk(user.key)).nextItems()).map((x) => x.sandboxId)).toContain(s.sandboxId);
    const policy = await as(user.key, 'PUT', '/admin/v1/config', { path: 'plugins.io.cubelet.internal.v1.network.allow_host_access', value: true });
    expect(policy.status).toBe(403);
    expect(policy.json).toMatchObject({ code: 130403, status: 403 });
    expect(policy.json.message).toMatch(/API key "user-a" \(key-[0-9a-f]{8}\) has the role user: PUT \/admin\/v1\/config takes an admin key/);
    for (const [m, p] of [
      ['GET', '/admin/v1/nodes'],
      ['POST', '/admin/v1/nodes/x/cordon'],
      ['GET', '/admin/v1/keys'],
      ['GET', '/admin/v1/watch'],
      ['GET', '/metrics'],
    ] as const)
      expect((await as(user.key, m, p)).status).toBe(403);
    // Nothing changed; the admin key may.
    expect((await admin('GET', '/admin/v1/config')).json.cubelet.plugins['io.cubelet.internal.v1.network'].allow_host_access).toBe(false);
    await s.kill();
    created.delete(s.sandboxId);
  });

  it("a user key sees only its own sandboxes through the E2B API: another key's is left out of lists and not found (get, kill, timeout, pause, connect, metrics); an admin key sees both", async () => {
    const [a, b] = [await newKey('tenant-a'), await newKey('tenant-b')];
    const sa = await create(a.key);
    const sb = await create(b.key);
    try {
      const ids = async (key: string) => (await Sandbox.list(sdk(key)).nextItems()).map((x) => x.sandboxId).sort();
      expect(await ids(a.key)).toEqual([sa.sandboxId]);
      expect(await ids(b.key)).toEqual([sb.sandboxId]);
      expect(await ids(d.apiKey)).toEqual([sa.sandboxId, sb.sandboxId].sort());
      const asB = (method: string, path: string, body?: unknown) => as(b.key, method, path, body);
      const answers = {
        get: (await asB('GET', `/sandboxes/${sa.sandboxId}`)).status,
        timeout: (await asB('POST', `/sandboxes/${sa.sandboxId}/timeout`, { timeout: 5 })).status,
        pause: (await asB('POST', `/sandboxes/${sa.sandboxId}/pause`, {})).status,
        connect: (await asB('POST', `/sandboxes/${sa.sandboxId}/connect`, { timeout: 60 })).status,
        metrics: (await asB('GET', `/sandboxes/${sa.sandboxId}/metrics`)).status,
        logs: (await asB('GET', `/sandboxes/${sa.sandboxId}/logs`)).status,
        kill: await Sandbox.kill(sa.sandboxId, sdk(b.key)),
      };
      expect(answers).toEqual({ get: 404, timeout: 404, pause: 404, connect: 404, metrics: 404, logs: 404, kill: false });
      // Nothing was done to it: still running, its end where it was.
      expect((await sa.commands.run('echo alive')).stdout).toBe('alive\n');
      expect((await Sandbox.getInfo(sa.sandboxId, sdk(d.apiKey))).state).toBe('running');
    } finally {
      await killAll();
    }
  });

  it('over a quota: 429 with Retry-After naming the quota, at once; the SDK raises RateLimitError', async () => {
    const small = await newKey('small', { quotas: { sandboxes: 1 } });
    await create(small.key);
    const over = await as(small.key, 'POST', '/sandboxes', { templateID: 'base' });
    expect(over.status).toBe(429);
    expect(over.headers.get('retry-after')).toBe('1');
    expect(over.json).toMatchObject({ code: 429, cubeCode: 130481, details: { quota: 'sandboxes', used: 1, limit: 1 } });
    expect(over.json.message).toMatch(
      /API key "small" \(key-[0-9a-f]{8}\) is at its sandboxes quota: 1 running or starting, at most 1 \(cubectl key set small --sandboxes N\)/,
    );
    await expect(create(small.key)).rejects.toBeInstanceOf(RateLimitError);
    // Memory: 256 MiB sandboxes under a 300 MiB quota.
    expect((await admin('PATCH', '/admin/v1/keys/small', { quotas: { sandboxes: null, memory_mib: 300 } })).status).toBe(200);
    const mem = await as(small.key, 'POST', '/v2/sandboxes', { templateID: 'base' });
    expect(mem.status).toBe(429);
    expect(mem.json.details).toEqual({ quota: 'memory_mib', used: 256, limit: 300 });
    // Creates per second.
    expect((await admin('PATCH', '/admin/v1/keys/small', { quotas: { memory_mib: null, creates_per_sec: 1 } })).status).toBe(200);
    const burst = await Promise.all([0, 1, 2].map(() => as(small.key, 'POST', '/v2/sandboxes', { templateID: 'base' })));
    for (const r of burst.filter((x) => x.status === 201)) created.add(r.json.sandboxID);
    const rated = burst.filter((x) => x.status === 429);
    expect(rated.length).toBeGreaterThanOrEqual(1);
    expect(rated[0]!.json.details).toMatchObject({ quota: 'creates_per_sec', limit: 1 });
    expect(rated[0]!.headers.get('retry-after')).toBe('1');
    // Usage is shown per key.
    const k = (await admin('GET', '/admin/v1/keys/small')).json as KeyView;
    expect(k.usage.sandboxes).toBe(1 + burst.filter((x) => x.status === 201).length);
    expect(k.limits).toEqual({ sandboxes: 1000, vcpus: 0, memory_mib: 0, creates_per_sec: 1 });
    await killAll();
  });

  it('every admin change is audited with its key id and name; a removed key gets 401 at once', async () => {
    const doomed = await newKey('doomed');
    expect((await as(doomed.key, 'GET', '/v2/sandboxes')).status).toBe(200);
    expect((await admin('DELETE', '/admin/v1/keys/doomed')).status).toBe(204);
    expect((await as(doomed.key, 'GET', '/v2/sandboxes')).status).toBe(401);
    expect((await admin('PUT', '/admin/v1/config', { path: 'sandbox.default_timeout_sec', value: 301 })).status).toBe(200);
    const rows = (await admin('GET', '/admin/v1/audit?limit=20')).json as AuditView[];
    const adminID = ((await admin('GET', '/admin/v1/keys/admin')).json as KeyView).id;
    expect(rows.find((r) => r.action === 'config.set')).toMatchObject({
      actor: adminID,
      actorName: 'admin',
      target: 'sandbox.default_timeout_sec',
      outcome: 'ok',
    });
    expect(rows.find((r) => r.action === 'key.rm')).toMatchObject({ actor: adminID, actorName: 'admin', target: doomed.id, outcome: 'ok' });
    expect(rows.find((r) => r.action === 'key.create' && r.target === doomed.id)).toMatchObject({ actor: adminID, detail: { name: 'doomed', role: 'user' } });
    // The last admin key stays.
    const last = await admin('DELETE', `/admin/v1/keys/${adminID}`);
    expect(last.status).toBe(409);
    expect(last.json.message).toMatch(/last admin key/);
  });

  it('cubectl key create, ls, set and rm, with --json, exit codes and one-line errors', async () => {
    const made = await cubectl(['key', 'create', 'ci', '--role', 'user', '--sandboxes', '3', '--vcpus', '2.5'], env);
    expect(made).toMatchObject({ code: 0, stderr: '' });
    const key = /^(e2b_[0-9a-f]{40})$/m.exec(made.stdout)?.[1];
    expect(key).toBeDefined();
    expect(made.stdout).toMatch(
      /created API key ci \(key-[0-9a-f]{8}\), role user; sandboxes 0\/3, vcpus 0\/2\.5, memory-mib 0\/-, creates-per-sec -\ne2b_[0-9a-f]{40}\nThis is the only time the key is shown/,
    );
    const json = JSON.parse((await cubectl(['key', 'create', 'ci-json', '--json'], env)).stdout) as NewKeyView;
    expect(json).toMatchObject({ name: 'ci-json', role: 'user', key: expect.stringMatching(/^e2b_/) });
    const ls = await cubectl(['key', 'ls'], env);
    expect(ls.code).toBe(0);
    expect(ls.stdout).toMatch(/^ID +NAME +ROLE +SANDBOXES +VCPUS +MEMORY_MIB +CREATES\/S +CREATED\n/);
    expect(ls.stdout).toMatch(/key-[0-9a-f]{8} +ci +user +0\/3 +0\/2\.5 +0\/- +- /);
    expect(ls.stdout).not.toContain(key!);
    const set = JSON.parse((await cubectl(['key', 'set', 'ci', '--sandboxes', 'default', '--creates-per-sec', '5', '--json'], env)).stdout) as KeyView;
    expect(set).toMatchObject({ quotas: { vcpus: 2.5, creates_per_sec: 5 }, limits: { sandboxes: 1000, creates_per_sec: 5 } });
    expect(await cubectl(['key', 'set', 'ci', '--vcpus', 'lots'], env)).toMatchObject({
      code: 2,
      stderr: expect.stringMatching(/^cubectl: .*expected a number >= 0/),
    });
    expect(await cubectl(['key', 'rm', 'admin'], env)).toMatchObject({ code: 1, stderr: expect.stringMatching(/^cubectl: 130409 .*last admin key/) });
    // With a user key cubectl is refused, and says which key it needs.
    const denied = await cubectl(['nodes'], { CUBE_API_URL: d.url, CUBE_API_KEY: key! });
    expect(denied).toMatchObject({ code: 1, stderr: expect.stringMatching(/^cubectl: 130403 .*cubectl needs an admin key/) });
    expect(await cubectl(['key', 'rm', 'ci', '--json'], env)).toMatchObject({ code: 0, stdout: expect.stringContaining('"removed": true') });
  }, 180_000); // ten cubectl processes (3-5 s each to start on this shared 2-core machine at load 24)
});
