// The Connect server (rpc.ts) over a real node:http listener with envd's Process service and
// an implementation of its own: the sandbox bound to a call, CubeErrors as Connect codes before
// and during a stream, keepalives, deadlines, both codecs with gzip, and that a client going
// away stops the stream without stopping what feeds it.
import { createServer, request, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { gunzipSync, gzipSync } from 'node:zlib';
import { create, fromBinary, toBinary } from '@bufbuild/protobuf';
import { Code, ConnectError, createClient, createContextKey, type Client, type HandlerContext } from '@connectrpc/connect';
import { compressionGzip, createConnectTransport } from '@connectrpc/connect-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ListRequestSchema, ListResponseSchema, Process, type ProcessEvent } from '../../src/api/envd/gen/process/process_pb.js';
import { callOf, connectServer, withKeepalives } from '../../src/api/envd/rpc.js';
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

const WHO = createContextKey<{ who: string } | undefined>(undefined);
const start = (pid: number) => ({ event: { event: { case: 'start' as const, value: { pid } } } });
const keepalive = { event: { event: { case: 'keepalive' as const, value: {} } } };

/** Start's `cmd` picks the behaviour; pids count ticks. */
async function* fakeStart(cmd: string, n: number, ctx: HandlerContext) {
  if (cmd === 'fail') {
    yield start(0);
    throw new CubeError('NOT_FOUND', 'the process went away');
  }
  const src = (async function* () {
    for await (const i of ticks(n, { forever: 20, slow: 1500 }[cmd] ?? 5)) yield start(i + 1);
  })();
  yield* withKeepalives(src, keepalive, ctx);
}

let server: Server;
let base: string;

beforeAll(async () => {
  const serve = connectServer(WHO, (router) =>
    router.service(Process, {
      async list(_req, ctx) {
        return { processes: [{ pid: 1, tag: callOf(ctx, WHO).who, config: { cmd: 'x'.repeat(4096) } }] };
      },
      async sendSignal() {
        throw new CubeError('NOT_FOUND', 'nothing here');
      },
      async *start(req, ctx) {
        yield* fakeStart(req.process?.cmd ?? '', req.process?.args.length ?? 0, ctx);
      },
    }),
  );
  server = createServer((req, res) => serve(req, res, { who: 'tester' }));
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

afterAll(async () => {
  server.closeAllConnections();
  await new Promise((r) => server.close(r));
});

const clientOf = (binary: boolean): Client<typeof Process> =>
  createClient(
    Process,
    createConnectTransport({ baseUrl: base, httpVersion: '1.1', useBinaryFormat: binary, ...(binary ? { sendCompression: compressionGzip } : {}) }),
  );

async function events(
  cmd: string,
  n = 0,
  opts: { headers?: Record<string, string>; timeoutMs?: number } = {},
): Promise<{ got: ProcessEvent[]; error?: ConnectError }> {
  const got: ProcessEvent[] = [];
  try {
    for await (const r of clientOf(false).start({ process: { cmd, args: Array(n).fill('a') } }, opts)) got.push(r.event!);
    return { got };
  } catch (e) {
    return { got, error: ConnectError.from(e) };
  }
}

describe('Connect server', () => {
  it('answers unary calls in JSON with the bound call', async () => {
    const res = await fetch(`${base}/process.Process/List`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' });
    expect(res.status).toBe(200);
    expect(((await res.json()) as { processes: { tag: string }[] }).processes[0]!.tag).toBe('tester');
  });

  it('speaks binary protobuf with gzip both ways, as older Python SDKs do', async () => {
    // node:http, not fetch: fetch would undo the gzip before the test could see it.
    const res = await new Promise<IncomingMessage>((resolve, reject) =>
      request(
        `${base}/process.Process/List`,
        {
          method: 'POST',
          headers: { 'content-type': 'application/proto', 'content-encoding': 'gzip', 'accept-encoding': 'gzip', 'connect-protocol-version': '1' },
        },
        resolve,
      )
        .on('error', reject)
        .end(gzipSync(toBinary(ListRequestSchema, create(ListRequestSchema)))),
    );
    expect(res.statusCode).toBe(200);
    expect(res.headers['content-type']).toBe('application/proto');
    expect(res.headers['content-encoding']).toBe('gzip');
    const body = gunzipSync(Buffer.concat(await res.toArray()));
    expect(fromBinary(ListResponseSchema, body).processes[0]).toMatchObject({ pid: 1, tag: 'tester' });
    const viaClient = await clientOf(true).list({});
    expect(viaClient.processes[0]!.config!.cmd).toHaveLength(4096);
  });

  it('answers errors with their Connect code and the cube code in the message', async () => {
    const res = await fetch(`${base}/process.Process/SendSignal`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' });
    expect(res.status).toBe(404);
    expect(await res.json()).toEqual({ code: 'not_found', message: '130404 nothing here' });
    const bad = await fetch(`${base}/process.Process/List`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{' });
    expect(bad.status).toBe(400);
    expect(((await bad.json()) as { code: string }).code).toBe('invalid_argument');
    const none = await clientOf(true)
      .sendInput({})
      .catch((e: unknown) => ConnectError.from(e));
    expect((none as ConnectError).code).toBe(Code.Unimplemented);
  });

  it('streams messages and ends cleanly', async () => {
    const r = await events('count', 3);
    expect(r.error).toBeUndefined();
    expect(r.got.map((e) => e.event.case === 'start' && e.event.value.pid)).toEqual([1, 2, 3]);
  });

  it('puts a failure after the first message into the end of the stream, with its code', async () => {
    const r = await events('fail');
    expect(r.got).toHaveLength(1);
    expect(r.error?.code).toBe(Code.NotFound);
    expect(r.error?.rawMessage).toBe('130404 the process went away');
  });

  it('sends keepalives while a stream idles', async () => {
    const r = await events('slow', 2, { headers: { 'keepalive-ping-interval': '1' } });
    expect(r.error).toBeUndefined();
    expect(r.got.filter((e) => e.event.case === 'start')).toHaveLength(2);
    expect(r.got.filter((e) => e.event.case === 'keepalive').length).toBeGreaterThanOrEqual(1);
  });

  it('ends a stream at Connect-Timeout-Ms with deadline_exceeded', async () => {
    const r = await events('forever', 100_000, { timeoutMs: 50 });
    expect(r.error?.code).toBe(Code.DeadlineExceeded);
  });

  it('detaches when the client goes away, leaving the producer to finish on its own', async () => {
    produced = 0;
    producerStopped = false;
    const ac = new AbortController();
    const it = clientOf(false)
      .start({ process: { cmd: 'count', args: Array(40).fill('a') } }, { signal: ac.signal })
      [Symbol.asyncIterator]();
    await it.next();
    ac.abort();
    // The producer is an async generator: detaching calls return() on it, so it stops
    // pulling; nothing is killed. What matters is that the server noticed and stopped sending.
    await sleep(300);
    expect(produced).toBeLessThan(40);
    expect(producerStopped).toBe(false);
  });
});
