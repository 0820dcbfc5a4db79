// E2B's lifecycle events API and webhooks against a real cubed and the real `e2b` SDK: the events
// of a sandbox's life (created, updated, paused, resumed, killed with its kill_reason), paged and
// filtered as E2B documents; webhooks registered, listed, updated and deleted, and their
// deliveries received by a real HTTP server that checks E2B's signature.
import { createHash } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { Sandbox } from 'e2b';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { call, startDaemon, type TestDaemon } from '../helpers/daemon.js';

let d: TestDaemon;
let opts: { apiKey: string; apiUrl: string; sandboxUrl: string };
let receiver: Server;
let hookURL: string;
const SECRET = 'secret-for-event-signature-verification';
const got: { headers: Record<string, string | string[] | undefined>; body: string }[] = [];

type Wire = {
  id: string;
  type: string;
  sandboxId: string;
  eventData: Record<string, unknown> | null;
  timestamp: string;
  version: string;
  sandboxTemplateId: string;
};

const events = async (id: string, q = ''): Promise<Wire[]> => {
  const r = await call(d, 'GET', `/events/sandboxes/${id}${q}`);
  expect(r.status).toBe(200);
  return r.json as Wire[];
};

async function until<T>(what: string, f: () => Promise<T | undefined>): Promise<T> {
  for (const end = Date.now() + 30_000; Date.now() < end; await sleep(250)) {
    const v = await f();
    if (v !== undefined) return v;
  }
  throw new Error(`timed out waiting for ${what}`);
}

beforeAll(async () => {
  d = await startDaemon();
  opts = { apiKey: d.apiKey, apiUrl: d.url, sandboxUrl: d.url };
  receiver = createServer((req, res) => {
    let body = '';
    req.on('data', (c: Buffer) => (body += c.toString()));
    req.on('end', () => {
      got.push({ headers: req.headers, body });
      res.writeHead(204).end();
    });
  });
  await new Promise<void>((r) => receiver.listen(0, '127.0.0.1', r));
  hookURL = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/webhook`;
});

afterAll(async () => {
  await new Promise((r) => receiver?.close(r));
  await d?.stop();
}, 180_000);

describe('E2B lifecycle events and webhooks', () => {
  it('registers, lists, gets, updates and deletes webhooks; refuses what E2B refuses', async () => {
    const body = {
      name: 'My Sandbox Webhook',
      url: hookURL,
      enabled: true,
      events: ['sandbox.lifecycle.created', 'sandbox.lifecycle.killed'],
      signatureSecret: SECRET,
    };
    const made = await call(d, 'POST', '/events/webhooks', body);
    expect(made.status).toBe(201);
    expect(made.json).toMatchObject({
      id: expect.any(String),
      name: body.name,
      url: hookURL,
      enabled: true,
      events: body.events,
      createdAt: expect.any(String),
    });
    expect(made.json).not.toHaveProperty('signatureSecret');
    const id = made.json.id as string;
    expect((await call(d, 'GET', '/events/webhooks')).json).toEqual([made.json]);
    expect((await call(d, 'GET', `/events/webhooks/${id}`)).json).toEqual(made.json);
    const upd = await call(d, 'PATCH', `/events/webhooks/${id}`, { enabled: false, events: ['sandbox.lifecycle.created'] });
    expect(upd).toMatchObject({ status: 200, json: { id, enabled: false, events: ['sandbox.lifecycle.created'], url: hookURL } });
    expect((await call(d, 'DELETE', `/events/webhooks/${id}`)).status).toBe(200);
    expect((await call(d, 'GET', `/events/webhooks/${id}`)).json).toMatchObject({ code: 404 });
    expect((await call(d, 'POST', '/events/webhooks', { ...body, events: ['sandbox.lifecycle.exploded'] })).status).toBe(400);
    expect((await call(d, 'POST', '/events/webhooks', { ...body, url: 'file:///etc/passwd' })).status).toBe(400);
    expect((await call(d, 'GET', '/events/sandboxes?limit=101')).status).toBe(400);
    expect((await call(d, 'GET', '/events/sandboxes?types=sandbox.lifecycle.nope')).status).toBe(400);
  });

  it("a sandbox's life as events (killed with its reason), paged and filtered; each delivered to the webhook once, signed", async () => {
    const hook = (
      await call(d, 'POST', '/events/webhooks', {
        name: 'rl',
        url: hookURL,
        enabled: true,
        events: ['sandbox.lifecycle.created', 'sandbox.lifecycle.updated', 'sandbox.lifecycle.paused', 'sandbox.lifecycle.resumed', 'sandbox.lifecycle.killed'],
        signatureSecret: SECRET,
      })
    ).json as { id: string };

    const sbx = await Sandbox.create({ ...opts, metadata: { episode: '42' } });
    await sbx.setTimeout(60_000);
    await sbx.pause();
    const back = await Sandbox.connect(sbx.sandboxId, opts);
    await back.setTimeout(1000);
    const killed = await until('the killed event', async () => (await events(sbx.sandboxId)).find((e) => e.type === 'sandbox.lifecycle.killed'));
    expect(killed.eventData).toMatchObject({ kill_reason: 'timeout', cube_code: 130411, sandbox_metadata: { episode: '42' } });

    const all = await events(sbx.sandboxId, '?orderAsc=true&limit=100');
    expect(all.map((e) => e.type)).toEqual([
      'sandbox.lifecycle.created',
      'sandbox.lifecycle.updated',
      'sandbox.lifecycle.paused',
      'sandbox.lifecycle.resumed',
      'sandbox.lifecycle.updated',
      'sandbox.lifecycle.killed',
    ]);
    expect(all[0]).toMatchObject({
      version: 'v1',
      sandboxId: sbx.sandboxId,
      sandboxTemplateId: expect.stringMatching(/./),
      eventData: { sandbox_metadata: { episode: '42' } },
      timestamp: expect.stringMatching(/Z$/),
    });
    expect(all[1]!.eventData).toMatchObject({ set_timeout: expect.stringMatching(/Z$/) });
    // Newest first by default, 10 at most; offset and limit page; types filter (given twice).
    expect((await events(sbx.sandboxId)).map((e) => e.id)).toEqual(all.map((e) => e.id).reverse());
    expect((await events(sbx.sandboxId, '?offset=1&limit=2')).map((e) => e.id)).toEqual([all[4]!.id, all[3]!.id]);
    expect((await events(sbx.sandboxId, '?types=sandbox.lifecycle.paused&types=sandbox.lifecycle.killed')).map((e) => e.type)).toEqual([
      'sandbox.lifecycle.killed',
      'sandbox.lifecycle.paused',
    ]);
    expect((await call(d, 'GET', '/events/sandboxes?limit=100')).json.map((e: Wire) => e.id)).toEqual(expect.arrayContaining(all.map((e) => e.id)));

    // Killed by its own client: kill_reason request.
    const own = await Sandbox.create(opts);
    await own.kill();
    const ownKilled = await until('the request kill', async () => (await events(own.sandboxId)).find((e) => e.type === 'sandbox.lifecycle.killed'));
    expect(ownKilled.eventData).toMatchObject({ kill_reason: 'request' });

    // Every event of both reached the receiver once, signed as E2B documents.
    const ids = [...all, ownKilled].map((e) => e.id);
    await until('the deliveries', async () => (ids.every((id) => got.some((g) => g.body.includes(id))) ? true : undefined));
    for (const id of ids) expect(got.filter((g) => (JSON.parse(g.body) as Wire).id === id)).toHaveLength(1);
    for (const g of got) {
      const expected = createHash('sha256')
        .update(SECRET + g.body)
        .digest('base64')
        .replace(/\+/g, '-')
        .replace(/\//g, '_')
        .replace(/=+$/, '');
      expect(g.headers).toMatchObject({
        'e2b-webhook-id': hook.id,
        'e2b-signature-version': 'v1',
        'e2b-signature': expected,
        'e2b-delivery-id': expect.any(String),
      });
    }
    const delivered = got.map((g) => JSON.parse(g.body) as Wire).find((e) => e.id === killed.id);
    expect(delivered).toEqual(killed);

    // Deleted: nothing more is sent to it.
    expect((await call(d, 'DELETE', `/events/webhooks/${hook.id}`)).status).toBe(200);
    const before = got.length;
    const last = await Sandbox.create(opts);
    await last.kill();
    await until('the last kill event', async () => (await events(last.sandboxId)).find((e) => e.type === 'sandbox.lifecycle.killed'));
    await sleep(2000);
    expect(got.length).toBe(before);
  }, 120_000);
});
