// The Connect server (rpc.ts) over a real node:http listener, with a small service of its
// own: framing, end-of-stream frames, errors before and after headers, deadlines, and that a
// client going away stops the stream without stopping what feeds it.
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ConnectError, decodeEnvelopes, encodeMessage } from '../../src/api/envd/connect.js';
import { serveConnect, untilAborted, type Service } from '../../src/api/envd/rpc.js';
import { CubeError } from '../../src/errors.js';

let produced = 0;
let producerStopped = false;

async function* ticks(n: number, everyMs: number): AsyncGenerator<number> {
  for (let i = 0; i < n; i++) {
    await sleep(everyMs);
    produced = i + 1;
    yield i;
  }
  producerStopped = true;
}

const svc: Service<{ who: string }> = {
  unary: {
    async Echo(call, msg) {
      return { who: call.who, msg };
    },
    async Missing() {
      throw new CubeError('NOT_FOUND', 'nothing here');
    },
  },
  stream: {
    Count: {
      keepalive: { keepalive: {} },
      async run(call, msg, out) {
        const n = Number((msg as { n?: number }).n ?? 3);
        for await (const i of untilAborted(ticks(n, 5), call.signal)) await out.send({ i });
      },
    },
    FailMidway: {
      keepalive: { keepalive: {} },
      async run(_call, _msg, out) {
        await out.send({ i: 0 });
        throw new ConnectError('data_loss', 'lost it');
      },
    },
    Idle: {
      keepalive: { keepalive: {} },
      async run(call, _msg, out) {
        await out.send({ started: true });
        await sleep(1300, undefined, { signal: call.signal }).catch(() => undefined);
      },
    },
    Forever: {
      keepalive: { keepalive: {} },
      async run(call, _msg, out) {
        await out.send({ started: true });
        for await (const i of untilAborted(ticks(100_000, 20), call.signal)) await out.send({ i });
      },
    },
  },
};

let server: Server;
let base: string;

beforeAll(async () => {
  server = createServer((req, res) => {
    void serveConnect(req, res, { 'test.Svc': svc }, { who: 'tester' }).then((served) => {
      if (!served) res.writeHead(404).end();
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

afterAll(async () => {
  server.closeAllConnections();
  await new Promise((r) => server.close(r));
});

async function stream(method: string, msg: unknown, headers: Record<string, string> = {}) {
  const res = await fetch(`${base}/test.Svc/${method}`, {
    method: 'POST',
    headers: { 'content-type': 'application/connect+json', ...headers },
    body: encodeMessage(msg),
  });
  const { envelopes, rest } = decodeEnvelopes(Buffer.from(await res.arrayBuffer()));
  return { status: res.status, type: res.headers.get('content-type'), rest: rest.length, frames: envelopes.map((e) => ({ flags: e.flags, msg: JSON.parse(e.data.toString()) as unknown })) };
}

describe('Connect server', () => {
  it('answers unary calls with plain JSON', async () => {
    const res = await fetch(`${base}/test.Svc/Echo`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"a":1}' });
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ who: 'tester', msg: { a: 1 } });
  });

  it('answers unary errors with a status and {code, message}', async () => {
    const res = await fetch(`${base}/test.Svc/Missing`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' });
    expect(res.status).toBe(404);
    expect(await res.json()).toEqual({ code: 'not_found', message: '130404 nothing here' });
    const bad = await fetch(`${base}/test.Svc/Echo`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{' });
    expect(bad.status).toBe(400);
    expect(((await bad.json()) as { code: string }).code).toBe('invalid_argument');
    const none = await fetch(`${base}/test.Svc/Nope`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' });
    expect(none.status).toBe(501);
  });

  it('streams envelopes and ends with the end-of-stream frame', async () => {
    const r = await stream('Count', { n: 3 });
    expect(r.status).toBe(200);
    expect(r.type).toBe('application/connect+json');
    expect(r.rest).toBe(0);
    expect(r.frames).toEqual([
      { flags: 0, msg: { i: 0 } },
      { flags: 0, msg: { i: 1 } },
      { flags: 0, msg: { i: 2 } },
      { flags: 2, msg: {} },
    ]);
  });

  it('puts a failure after the headers into the end-of-stream frame', async () => {
    const r = await stream('FailMidway', {});
    expect(r.status).toBe(200);
    expect(r.frames).toEqual([
      { flags: 0, msg: { i: 0 } },
      { flags: 2, msg: { error: { code: 'data_loss', message: 'lost it' } } },
    ]);
  });

  it('refuses a stream sent as unary content', async () => {
    const res = await fetch(`${base}/test.Svc/Count`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' });
    expect(res.status).toBe(400);
    expect(((await res.json()) as { message: string }).message).toMatch(/server stream/);
  });

  it('sends keepalives while a stream idles', async () => {
    const r = await stream('Idle', {}, { 'keepalive-ping-interval': '1' });
    expect(r.frames[0]).toEqual({ flags: 0, msg: { started: true } });
    expect(r.frames.filter((f) => JSON.stringify(f.msg) === '{"keepalive":{}}').length).toBeGreaterThanOrEqual(1);
    expect(r.frames.at(-1)).toEqual({ flags: 2, msg: {} });
  });

  it('ends a stream at Connect-Timeout-Ms with deadline_exceeded', async () => {
    const r = await stream('Forever', {}, { 'connect-timeout-ms': '50' });
    const last = r.frames.at(-1)!;
    expect(last.flags).toBe(2);
    expect((last.msg as { error: { code: string } }).error.code).toBe('deadline_exceeded');
  });

  it('detaches when the client goes away, leaving the producer to finish on its own', async () => {
    produced = 0;
    producerStopped = false;
    const ac = new AbortController();
    const res = await fetch(`${base}/test.Svc/Count`, { method: 'POST', headers: { 'content-type': 'application/connect+json' }, body: encodeMessage({ n: 40 }), signal: ac.signal });
    const reader = res.body!.getReader();
    await reader.read();
    ac.abort();
    // The producer is an async generator: detaching calls return() on it, so it stops
    // pulling; nothing is killed. What matters is that the server noticed and stopped sending.
    await sleep(300);
    expect(produced).toBeLessThan(40);
    expect(producerStopped).toBe(false);
  });
});
