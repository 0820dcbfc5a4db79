// Hostile input to the E2B and admin APIs (issue 12 item 6): user names that are
// Object.prototype keys, out-of-range numbers, bad environment variables and over-long names all
// get a 4xx with a code from src/errors.ts, never a 5xx and never root.
import { CommandExitError, Sandbox } from 'e2b';
import type { ServerResponse } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sendError } from '../../src/http.js';
import { CubeError } from '../../src/errors.js';
import { startDaemon, type TestDaemon } from '../helpers/daemon.js';

let d: TestDaemon;
let opts: { apiKey: string; apiUrl: string; sandboxUrl: string };
const created: string[] = [];

async function call(method: string, path: string, body?: unknown) {
  const res = await fetch(`${d.url}${path}`, {
    method,
    headers: { 'x-api-key': d.apiKey, ...(body !== undefined ? { 'content-type': 'application/json' } : {}) },
    ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
  });
  const text = await res.text();
  const json = text ? (JSON.parse(text) as Record<string, unknown>) : undefined;
  if (res.status === 201 && typeof json?.sandboxID === 'string') created.push(json.sandboxID);
  return { status: res.status, json };
}

beforeAll(async () => {
  d = await startDaemon({ master: { sandbox: { max_timeout_sec: 3600 } } });
  opts = { apiKey: d.apiKey, apiUrl: d.url, sandboxUrl: d.url };
});

afterAll(async () => {
  try {
    await Promise.all(created.map((id) => Sandbox.kill(id, opts).catch(() => false)));
  } finally {
    await d?.stop();
  }
});

const PROTO_KEYS = ['constructor', '__proto__', 'toString', 'hasOwnProperty', 'valueOf'];

describe('hostile API input', () => {
  it('a user named like an Object.prototype key is refused, never run as uid 0', async () => {
    const sbx = await Sandbox.create({ ...opts, timeoutMs: 120_000 });
    created.push(sbx.sandboxId);
    for (const user of PROTO_KEYS) {
      const r = await sbx.commands.run('id -u', { user: user as 'user' }).then(
        (x) => ({ ok: true as const, stdout: x.stdout }),
        (e: unknown) => ({ ok: false as const, e }),
      );
      expect(r.ok, `user ${user} ran: ${r.ok ? r.stdout : ''}`).toBe(false);
      expect(r.ok ? undefined : r.e).not.toBeInstanceOf(CommandExitError);
      expect(String(r.ok ? '' : (r.e as Error).message)).toMatch(/unknown user|unauthenticated|401|400/i);
    }
    // The files API by query parameter: 400/401 with a code, not 500, and nothing written as root.
    for (const user of PROTO_KEYS) {
      const url = `${d.url}/files?path=/tmp/x-${user.length}&username=${encodeURIComponent(user)}`;
      const res = await fetch(url, {
        method: 'POST',
        headers: {
          'e2b-sandbox-id': sbx.sandboxId,
          'e2b-sandbox-port': '49983',
          'x-access-token': (sbx as unknown as { envdAccessToken?: string }).envdAccessToken ?? '',
          'content-type': 'application/octet-stream',
        },
        body: 'x',
      });
      expect([400, 401], `files as ${user}: ${res.status} ${await res.clone().text()}`).toContain(res.status);
    }
    expect((await sbx.commands.run('ls /tmp')).stdout).not.toMatch(/x-/);
    // Still works for the real users.
    expect((await sbx.commands.run('id -u', { user: 'root' })).stdout).toBe('0\n');
    expect((await sbx.commands.run('id -u')).stdout).toBe('1000\n');
  });

  it('out-of-range numbers are 400 with a code, never 500 or 503', async () => {
    const bodies: Record<string, unknown>[] = [
      { timeout: 1e15 },
      { timeout: 3601 }, // above sandbox.max_timeout_sec
      { timeout: -1 },
      { cpuCount: 1e9 },
      { cpuCount: -2 },
      { memoryMB: -5 },
      { memoryMB: 1e12 },
      { memoryMB: 'NaN' },
    ];
    for (const b of bodies) {
      const r = await call('POST', '/sandboxes', { templateID: 'base', ...b });
      expect(r.status, `${JSON.stringify(b)} -> ${r.status} ${JSON.stringify(r.json)}`).toBe(400);
      expect(r.json).toMatchObject({ code: 400, cubeCode: 130400 });
    }
    const ok = await call('POST', '/sandboxes', { templateID: 'base', timeout: 60 });
    expect(ok.status).toBe(201);
    const id = ok.json!.sandboxID as string;
    for (const path of [`/sandboxes/${id}/timeout`, `/sandboxes/${id}/connect`]) {
      const r = await call('POST', path, { timeout: 1e15 });
      expect(r.status, `${path} -> ${r.status} ${JSON.stringify(r.json)}`).toBe(400);
    }
    const admin = await call('POST', '/admin/v1/sandboxes', { timeoutSec: 1e15 });
    expect(admin.status).toBe(400);
    expect(admin.json).toMatchObject({ code: 130400 });
    const adminCpu = await call('POST', '/admin/v1/sandboxes', { cpus: 1e9 });
    expect(adminCpu.status).toBe(400);
  });

  it('bad environment variables and over-long names are refused at create, not at the first exec', async () => {
    const bad: Record<string, unknown>[] = [
      { envVars: { 'A=B': 'x' } },
      { envVars: { '1X': 'x' } },
      { envVars: { '': 'x' } },
      { envVars: { X: 'a\0b' } },
      { envVars: { ['X'.repeat(300)]: 'x' } },
      { envVars: { X: 'v'.repeat(200_000) } },
      { metadata: { ['k'.repeat(300)]: 'v' } },
      { metadata: { k: 'v'.repeat(5000) } },
      { metadata: Object.fromEntries(Array.from({ length: 200 }, (_, i) => [`k${i}`, 'v'])) },
      { templateID: 't'.repeat(300) },
    ];
    for (const b of bad) {
      const r = await call('POST', '/sandboxes', { templateID: 'base', ...b });
      expect(r.status, `${JSON.stringify(b).slice(0, 80)} -> ${r.status} ${JSON.stringify(r.json).slice(0, 200)}`).toBe(400);
      expect(r.json).toMatchObject({ cubeCode: 130400 });
    }
    const admin = await call('POST', '/admin/v1/sandboxes', { envVars: { 'A B': 'x' } });
    expect(admin.status).toBe(400);
  });

  it('cube.net_raw=true (the host ids) is refused unless the node allows it (identity.allow_net_raw)', async () => {
    const r = await call('POST', '/sandboxes', { templateID: 'base', metadata: { 'cube.net_raw': 'true' } });
    expect(r.status, JSON.stringify(r.json)).toBe(403);
    expect(r.json).toMatchObject({ code: 403, cubeCode: 130436, message: expect.stringContaining('identity.allow_net_raw') });
    const admin = await call('POST', '/admin/v1/sandboxes', { metadata: { 'cube.net_raw': 'true' } });
    expect(admin.status).toBe(403);
    expect(admin.json).toMatchObject({ code: 130436, message: expect.stringContaining('identity.allow_net_raw') });
    const allowing = await startDaemon({ cubelet: { identity: { allow_net_raw: true } } });
    try {
      const sbx = await Sandbox.create('base', {
        apiKey: allowing.apiKey,
        apiUrl: allowing.url,
        sandboxUrl: allowing.url,
        metadata: { 'cube.net_raw': 'true' },
      });
      // Allowed, as before the setting: the host's ids (no user namespace of its own).
      expect((await sbx.commands.run('cat /proc/self/uid_map')).stdout).toMatch(/^\s*0\s+0\s+4294967295\n$/);
      await sbx.kill();
    } finally {
      await allowing.stop();
    }
  });

  it('every 5xx answer is logged with its cause, 4xx answers are not', () => {
    const logged: unknown[] = [];
    const log = { error: (o: unknown) => logged.push(o) };
    const res = () => {
      const r = {
        statusCode: 0,
        headersSent: false,
        body: '',
        writeHead: (s: number) => ((r.statusCode = s), r),
        setHeader: () => r,
        end: (b?: string) => ((r.body = b ?? ''), r),
      };
      return r as unknown as ServerResponse & { statusCode: number; body: string };
    };
    const cause = new Error('disk on fire');
    const a = res();
    sendError(a, new CubeError('CREATE_FAILED', 'mount failed', { cause }), 'e2b', log);
    const b = res();
    sendError(b, new TypeError('x is undefined'), 'admin', log);
    const c = res();
    sendError(c, new CubeError('BAD_REQUEST', 'no'), 'e2b', log);
    expect([a.statusCode, b.statusCode, c.statusCode]).toEqual([500, 500, 400]);
    expect(logged).toHaveLength(2);
    expect(
      JSON.stringify(logged[0], (_k, v: unknown) => (v instanceof Error ? { message: v.message, cause: (v as Error & { cause?: unknown }).cause } : v)),
    ).toContain('disk on fire');
  });
});
