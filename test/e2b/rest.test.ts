// The E2B REST API over raw HTTP: the older path family (/sandboxes, /resume, v1 list) that
// SDKs before 2.51 call, the status codes and the JSON error bodies the SDKs test.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startDaemon, type TestDaemon } from '../helpers/daemon.js';

let d: TestDaemon;
const created: string[] = [];

async function call(method: string, path: string, body?: unknown, headers: Record<string, string> = {}) {
  const res = await fetch(`${d.url}${path}`, {
    method,
    headers: { 'x-api-key': d.apiKey, ...(body !== undefined ? { 'content-type': 'application/json' } : {}), ...headers },
    ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
  });
  const text = await res.text();
  return { status: res.status, headers: res.headers, json: text ? (JSON.parse(text) as Record<string, unknown> & Record<string, unknown>[]) : undefined };
}

async function createV1(body: Record<string, unknown> = {}): Promise<Record<string, unknown>> {
  const r = await call('POST', '/sandboxes', { templateID: 'base', secure: true, timeout: 120, ...body });
  expect(r.status).toBe(201);
  created.push(r.json!.sandboxID as string);
  return r.json!;
}

beforeAll(async () => {
  d = await startDaemon();
});

afterAll(async () => {
  try {
    await Promise.all(created.map((id) => call('DELETE', `/sandboxes/${id}`).catch(() => undefined)));
  } finally {
    await d?.stop();
  }
});

describe('E2B REST, older path family', () => {
  it('POST /sandboxes answers the Sandbox shape', async () => {
    const s = await createV1({ metadata: { k: 'v' } });
    expect(s).toMatchObject({ clientID: '6532622b', envdVersion: '0.6.4', trafficAccessToken: null });
    expect(s.sandboxID).toMatch(/^[a-z][a-z0-9]{19}$/);
    expect(typeof s.envdAccessToken).toBe('string');
    expect(s).not.toHaveProperty('domain');
    const other = await createV1();
    expect(other.envdAccessToken).not.toBe(s.envdAccessToken);
  });

  it('GET /sandboxes/{id} (also as <id>-<clientID>) gives the detail', async () => {
    const s = await createV1({ metadata: { who: 'detail' } });
    for (const id of [s.sandboxID, `${s.sandboxID}-6532622b`]) {
      const r = await call('GET', `/sandboxes/${id}`);
      expect(r.status).toBe(200);
      expect(r.json).toMatchObject({
        sandboxID: s.sandboxID,
        state: 'running',
        metadata: { who: 'detail' },
        cpuCount: expect.any(Number),
        memoryMB: expect.any(Number),
      });
      expect(Date.parse(r.json!.endAt as string) - Date.parse(r.json!.startedAt as string)).toBeGreaterThan(60_000);
    }
  });

  it('cpuCount and memoryMB in the create body size the sandbox (our extension); bad sizes are 400', async () => {
    const s = await createV1({ cpuCount: 2, memoryMB: 320 });
    const r = await call('GET', `/sandboxes/${s.sandboxID}`);
    expect(r.json).toMatchObject({ cpuCount: 2, memoryMB: 320 });
    const bad = await call('POST', '/v2/sandboxes', { templateID: 'base', memoryMB: -5 });
    expect(bad.status).toBe(400);
    expect(bad.json).toMatchObject({ code: 400 });
  });

  it('v1 list shows running sandboxes only; v2 list pages with X-Next-Token', async () => {
    const a = await createV1({ metadata: { grp: 'v1list' } });
    const b = await createV1({ metadata: { grp: 'v1list' } });
    expect((await call('POST', `/sandboxes/${a.sandboxID}/pause`, {})).status).toBe(204);
    const v1 = await call('GET', '/sandboxes');
    const ids = (v1.json as unknown as { sandboxID: string; state: string }[]).map((s) => s.sandboxID);
    expect(ids).toContain(b.sandboxID);
    expect(ids).not.toContain(a.sandboxID);
    const filter = encodeURIComponent('grp=v1list');
    const p1 = await call('GET', `/v2/sandboxes?metadata=${filter}&limit=1`);
    expect(p1.json).toHaveLength(1);
    const token = p1.headers.get('x-next-token');
    expect(token).toBeTruthy();
    const p2 = await call('GET', `/v2/sandboxes?metadata=${filter}&limit=1&nextToken=${encodeURIComponent(token!)}`);
    expect(p2.json).toHaveLength(1);
    expect(p2.headers.get('x-next-token')).toBeNull();
    expect([(p1.json as unknown as { sandboxID: string }[])[0]!.sandboxID, (p2.json as unknown as { sandboxID: string }[])[0]!.sandboxID].sort()).toEqual(
      [a.sandboxID, b.sandboxID].sort(),
    );
  });

  it('/resume resumes (201) and refuses a running sandbox (409); connect says 200 or 201', async () => {
    const s = await createV1();
    const id = s.sandboxID as string;
    expect((await call('POST', `/sandboxes/${id}/resume`, { timeout: 60 })).status).toBe(409);
    expect((await call('POST', `/sandboxes/${id}/pause`, {})).status).toBe(204);
    const again = await call('POST', `/sandboxes/${id}/pause`, {});
    expect(again.status).toBe(409);
    expect(again.json).toMatchObject({ code: 409 });
    const resumed = await call('POST', `/sandboxes/${id}/resume`, { timeout: 60 });
    expect(resumed.status).toBe(201);
    expect(resumed.json).toMatchObject({ sandboxID: id, envdAccessToken: s.envdAccessToken });
    expect((await call('POST', `/sandboxes/${id}/connect`, { timeout: 60 })).status).toBe(200);
    expect((await call('POST', `/sandboxes/${id}/pause`, {})).status).toBe(204);
    expect((await call('POST', `/v2/sandboxes/${id}/connect`, {})).status).toBe(201);
  });

  it('timeout, refreshes and metrics', async () => {
    const s = await createV1();
    const id = s.sandboxID as string;
    expect((await call('POST', `/sandboxes/${id}/timeout`, { timeout: 30 })).status).toBe(204);
    const end1 = Date.parse((await call('GET', `/sandboxes/${id}`)).json!.endAt as string);
    expect(end1 - Date.now()).toBeLessThanOrEqual(30_000);
    expect((await call('POST', `/sandboxes/${id}/refreshes`, { duration: 600 })).status).toBe(204);
    const end2 = Date.parse((await call('GET', `/sandboxes/${id}`)).json!.endAt as string);
    expect(end2).toBeGreaterThan(end1);
    // A shorter refresh never shortens the lifetime.
    expect((await call('POST', `/sandboxes/${id}/refreshes`, { duration: 5 })).status).toBe(204);
    expect(Date.parse((await call('GET', `/sandboxes/${id}`)).json!.endAt as string)).toBe(end2);
    const m = await call('GET', `/sandboxes/${id}/metrics`);
    expect(m.status).toBe(200);
    expect(Array.isArray(m.json)).toBe(true);
  });

  it('lists templates with base as the default alias', async () => {
    const r = await call('GET', '/templates');
    expect(r.status).toBe(200);
    const list = r.json as unknown as { templateID: string; aliases: string[] }[];
    expect(list.some((t) => t.aliases.includes('base'))).toBe(true);
  });
});

describe('E2B REST errors', () => {
  it('answers a missing sandbox with a 404 JSON body on every route', async () => {
    for (const [m, p] of [
      ['GET', '/sandboxes/zzzzzzzzzzzzzzzzzzzz'],
      ['DELETE', '/sandboxes/zzzzzzzzzzzzzzzzzzzz'],
      ['POST', '/sandboxes/zzzzzzzzzzzzzzzzzzzz/timeout'],
      ['POST', '/sandboxes/zzzzzzzzzzzzzzzzzzzz/pause'],
      ['POST', '/v2/sandboxes/zzzzzzzzzzzzzzzzzzzz/connect'],
    ] as const) {
      const r = await call(m, p, m === 'POST' ? { timeout: 10 } : undefined);
      expect([m, p, r.status]).toEqual([m, p, 404]);
      expect(r.json).toMatchObject({ code: 404, cubeCode: 130404, message: expect.stringContaining('not found') });
    }
  });

  it('deletes a paused sandbox (204); a repeat of that delete is 204 again (issue 24), the sandbox 404', async () => {
    const s = await createV1();
    expect((await call('POST', `/sandboxes/${s.sandboxID}/pause`, {})).status).toBe(204);
    expect((await call('DELETE', `/sandboxes/${s.sandboxID}`)).status).toBe(204);
    expect((await call('DELETE', `/sandboxes/${s.sandboxID}`)).status).toBe(204);
    expect((await call('GET', `/sandboxes/${s.sandboxID}`)).status).toBe(404);
  });

  it('names an unknown template and a bad body', async () => {
    const t = await call('POST', '/v2/sandboxes', { templateID: 'no-such-template' });
    expect(t.status).toBe(404);
    expect(t.json!.message).toMatch(/no-such-template/);
    const b = await call('POST', '/v2/sandboxes', { templateID: 'base', timeout: 'soon' });
    expect(b.status).toBe(400);
    expect(b.json).toMatchObject({ code: 400, cubeCode: 130400 });
    expect(b.json!.message).toMatch(/timeout/);
    const ap = await call('POST', '/v2/sandboxes', { templateID: 'base', autoPause: true, autoPauseMemory: false });
    expect(ap.status).toBe(400);
    expect(ap.json!.message).toMatch(/keepMemory false is not supported/);
    const ar = await call('POST', '/v2/sandboxes', { templateID: 'base', autoResume: { enabled: true } });
    expect(ar.status).toBe(400);
    expect(ar.json!.message).toMatch(/autoResume needs autoPause/);
    // Network options we cannot enforce are refused, not ignored; bad destinations are named.
    const mask = await call('POST', '/v2/sandboxes', { templateID: 'base', network: { maskRequestHost: 'x.example' } });
    expect(mask.status).toBe(400);
    expect(mask.json!.message).toMatch(/network\.maskRequestHost is not supported/);
    const bad = await call('POST', '/v2/sandboxes', { templateID: 'base', network: { denyOut: ['1.2.3.4/40'] } });
    expect(bad.status).toBe(400);
    expect(bad.json!.message).toMatch(/network\.denyOut: "1\.2\.3\.4\/40" is not an IPv4 address or CIDR/);
  });

  it('401 with a body without a key, with a wrong key, and Bearer works', async () => {
    const none = await fetch(`${d.url}/v2/sandboxes`);
    expect(none.status).toBe(401);
    expect(await none.json()).toMatchObject({ code: 401 });
    expect((await call('GET', '/v2/sandboxes', undefined, { 'x-api-key': 'e2b_wrong' })).status).toBe(401);
    const bearer = await fetch(`${d.url}/v2/sandboxes`, { headers: { authorization: `Bearer ${d.apiKey}` } });
    expect(bearer.status).toBe(200);
  });

  it('envd traffic for an unknown or paused sandbox gets 502, a wrong token 401', async () => {
    const envd = (id: string, token?: string) =>
      fetch(`${d.url}/filesystem.Filesystem/ListDir`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'e2b-sandbox-id': id, 'e2b-sandbox-port': '49983', ...(token ? { 'x-access-token': token } : {}) },
        body: '{"path":"/"}',
      });
    const unknown = await envd('zzzzzzzzzzzzzzzzzzzz');
    expect(unknown.status).toBe(502);
    expect(await unknown.json()).toMatchObject({ code: 502, sandboxId: 'zzzzzzzzzzzzzzzzzzzz' });
    const s = await createV1();
    const ok = await envd(s.sandboxID as string, s.envdAccessToken as string);
    expect(ok.status).toBe(200);
    expect(((await ok.json()) as { entries: unknown[] }).entries.length).toBeGreaterThan(0);
    expect((await envd(s.sandboxID as string, 'wrong-token')).status).toBe(401);
    // Old SDKs send only X-Access-Token on /files: it alone finds the sandbox.
    const byToken = await fetch(`${d.url}/files?path=/home/user/t.txt`, {
      method: 'POST',
      headers: { 'x-access-token': s.envdAccessToken as string, 'content-type': 'application/octet-stream' },
      body: 'tok',
    });
    expect(byToken.status).toBe(200);
    expect(await byToken.json()).toEqual([{ name: 't.txt', type: 'file', path: '/home/user/t.txt' }]);
    const missing = await fetch(`${d.url}/files?path=/home/user/none`, { headers: { 'x-access-token': s.envdAccessToken as string } });
    expect(missing.status).toBe(404);
    expect(await missing.json()).toMatchObject({ code: 404 });
    expect((await call('POST', `/sandboxes/${s.sandboxID}/pause`, {})).status).toBe(204);
    expect((await envd(s.sandboxID as string, s.envdAccessToken as string)).status).toBe(502);
  });
});
