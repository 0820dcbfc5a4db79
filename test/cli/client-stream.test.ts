// cubectl's client on a stream (the watch): the caller's signal ends it at any time, not only
// before the answer starts. A real HTTP server on loopback that sends one message, then nothing.
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CubeClient } from '../../src/cli/client.js';

let server: Server;
let url: string;

beforeAll(async () => {
  server = createServer((_req, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    res.write(`event: stats\ndata: ${JSON.stringify({ type: 'stats', stats: {} })}\n\n`);
    // ...and nothing more: only the caller's abort ends it.
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

afterAll(async () => {
  server.closeAllConnections();
  await new Promise((r) => server.close(r));
});

describe('CubeClient.watch', () => {
  it('ends when the signal aborts mid-stream', async () => {
    const c = new CubeClient({ baseUrl: url, timeoutMs: 60_000 });
    const ac = new AbortController();
    const got: string[] = [];
    const done = (async () => {
      try {
        for await (const m of c.watch(ac.signal)) {
          got.push(m.type);
          ac.abort();
        }
      } catch (e) {
        if (!ac.signal.aborted) throw e;
      }
    })();
    // Ends at all: the server never ends it, and the request timeout is past the test's.
    await done;
    expect(got).toEqual(['stats']);
  });

  it('is not cut by the answer timer once the stream has started', async () => {
    // Long enough for the first message on a loaded machine (100 ms failed at load 10), and
    // shorter than the wait below.
    const c = new CubeClient({ baseUrl: url, timeoutMs: 1_000 });
    const ac = new AbortController();
    const it = c.watch(ac.signal)[Symbol.asyncIterator]();
    expect((await it.next()).value).toMatchObject({ type: 'stats' });
    const next = it.next();
    // Past the timeout the stream still waits for its next message.
    const first = await Promise.race([
      next.then(
        () => 'ended',
        () => 'failed',
      ),
      new Promise((r) => setTimeout(() => r('open'), 2_000)),
    ]);
    expect(first).toBe('open');
    ac.abort();
    await expect(next).rejects.toThrow();
  });
});
