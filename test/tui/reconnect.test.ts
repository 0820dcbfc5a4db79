// The watch client reconnects at most a second after a failure (it waited up to 10 s, so the
// console came back 8-12 s after a daemon restart), and ctrl-r (retryNow) connects at once.
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { backoffDelay, startWatch } from '../../src/tui/watch.js';
import { createConsoleStore } from '../../src/tui/store.js';
import { loadStream, toSse } from './replay.js';

let server: Server | undefined;
afterEach(() => new Promise<void>((r) => (server ? server.close(() => r()) : r())));

const until = async (what: string, pred: () => boolean, ms = 10_000) => {
  const end = Date.now() + ms;
  while (!pred()) {
    if (Date.now() > end) throw new Error(`never ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
};

describe('watch reconnect', () => {
  it('backs off from 0.5 s to 1 s by default', () => {
    expect([1, 2, 3, 10].map((a) => backoffDelay(a, 500, 1000))).toEqual([500, 1000, 1000, 1000]);
  });

  it('retryNow connects at once instead of at the next retry', async () => {
    // A port that refuses: find a free one, then close it.
    const probe = createServer();
    await new Promise<void>((r) => probe.listen(0, '127.0.0.1', () => r()));
    const port = (probe.address() as AddressInfo).port;
    await new Promise<void>((r) => probe.close(() => r()));
    const url = `http://127.0.0.1:${port}`;
    const store = createConsoleStore({ apiUrl: url });
    // Retries an hour apart: only retryNow can reconnect within this test.
    const w = startWatch({ baseUrl: url, apiKey: 'k' }, store, { refreshMs: 20, backoffMinMs: 3_600_000, backoffMaxMs: 3_600_000 });
    try {
      await until('stale', () => store.getState().conn.state === 'stale');
      server = createServer((_req, res) => {
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        res.write(toSse(loadStream('watch-handwritten.ndjson')));
      });
      await new Promise<void>((r) => server!.listen(port, '127.0.0.1', () => r()));
      w.retryNow();
      await until('live with the snapshot', () => store.getState().conn.state === 'live' && store.getState().data.nodeOrder.length > 0);
    } finally {
      w.stop();
      server?.closeAllConnections();
    }
  });

  it('retryNow ends an attempt that hangs (a daemon that takes the connection and never answers) and connects at once', async () => {
    let answer = false;
    let requests = 0;
    server = createServer((_req, res) => {
      requests++;
      if (!answer) return; // frozen: the connection is taken, nothing is ever answered
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write(toSse(loadStream('watch-handwritten.ndjson')));
    });
    await new Promise<void>((r) => server!.listen(0, '127.0.0.1', () => r()));
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    const store = createConsoleStore({ apiUrl: url });
    // Silence bound and retries an hour away: only retryNow can end the hung attempt within this test.
    const w = startWatch({ baseUrl: url, apiKey: 'k' }, store, { refreshMs: 20, silenceMs: 3_600_000, backoffMinMs: 3_600_000, backoffMaxMs: 3_600_000 });
    try {
      await until('the first attempt reaching the server', () => requests === 1);
      answer = true;
      w.retryNow();
      await until('live with the snapshot', () => store.getState().conn.state === 'live' && store.getState().data.nodeOrder.length > 0);
      expect(requests).toBe(2);
      // Live: ctrl-r leaves a working stream alone.
      w.retryNow();
      await new Promise((r) => setTimeout(r, 100));
      expect([store.getState().conn.state, requests]).toEqual(['live', 2]);
    } finally {
      w.stop();
      server?.closeAllConnections();
    }
  });
});
