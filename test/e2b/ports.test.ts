// Port routing: a server started inside the sandbox answers through E2b-Sandbox-Port and
// through Host <port>-<sandboxID>.<domain> (sandbox.getHost), plain HTTP and upgrades, and
// streams pass as they come: headers before the first body byte, each event, each frame.
import { createHash, randomBytes } from 'node:crypto';
import { request, type IncomingHttpHeaders } from 'node:http';
import type { Socket } from 'node:net';
import { Sandbox } from 'e2b';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startDaemon, type TestDaemon } from '../helpers/daemon.js';
import { echo, get as getFrom, startPortServers, startStreamServers, upgrade as upgradeTo } from '../helpers/sandbox-ports.js';

const DOMAIN = 'sbx.test';
let d: TestDaemon;
let sbx: Sandbox | undefined;
/** Created with network.allowPublicTraffic false: its ports need its traffic access token. */
let closed: Sandbox | undefined;

const get = (path: string, headers: IncomingHttpHeaders) => getFrom(d.url, path, headers);
const upgrade = (headers: IncomingHttpHeaders) => upgradeTo(d.url, headers);

beforeAll(async () => {
  d = await startDaemon({ args: ['--sandbox-domain', DOMAIN] });
  const opts = { apiKey: d.apiKey, apiUrl: d.url, sandboxUrl: d.url };
  // Each kept as soon as it exists, so afterAll removes it even when the other create failed.
  await Promise.all([Sandbox.create(opts).then((s) => (sbx = s)), Sandbox.create({ ...opts, network: { allowPublicTraffic: false } }).then((s) => (closed = s))]);
  await Promise.all([startPortServers(sbx!, 'hello from the sandbox'), startPortServers(closed!, 'only with the token'), startStreamServers(sbx!)]);
}, 180_000);

afterAll(async () => {
  try {
    await Promise.all([sbx?.kill(), closed?.kill()]);
  } finally {
    await d?.stop();
  }
});

describe('port routing', () => {
  it('advertises the domain and builds <port>-<id>.<domain> hosts', () => {
    expect(sbx!.getHost(8000)).toBe(`8000-${sbx!.sandboxId}.${DOMAIN}`);
  });

  it('proxies HTTP by E2b-Sandbox-Port', async () => {
    const r = await get('/index.html', { 'e2b-sandbox-id': sbx!.sandboxId, 'e2b-sandbox-port': '8000' });
    expect(r).toEqual({ status: 200, body: 'hello from the sandbox' });
  });

  it('proxies HTTP by Host, and envd too on port 49983', async () => {
    const r = await get('/index.html', { host: `${sbx!.getHost(8000)}:3000` });
    expect(r).toEqual({ status: 200, body: 'hello from the sandbox' });
    expect((await get('/health', { host: sbx!.getHost(49983) })).status).toBe(204);
  });

  it('answers 502 JSON for a closed port and for an unknown sandbox', async () => {
    const closed = await get('/', { 'e2b-sandbox-id': sbx!.sandboxId, 'e2b-sandbox-port': '8999' });
    expect(closed.status).toBe(502);
    expect(JSON.parse(closed.body)).toMatchObject({ code: 502, message: expect.stringContaining('port 8999') });
    const unknown = await get('/', { host: `8000-zzzzzzzzzzzzzzzzzzzz.${DOMAIN}` });
    expect(unknown.status).toBe(502);
  });

  it("allowPublicTraffic false: its ports answer only with its traffic access token (E2B's 403 otherwise), envd is not affected", async () => {
    const token = closed!.trafficAccessToken;
    expect(token).toMatch(/^\S{16,}$/);
    expect(sbx!.trafficAccessToken).toBeUndefined();
    const to = { 'e2b-sandbox-id': closed!.sandboxId, 'e2b-sandbox-port': '8000' };
    const missing = await get('/index.html', to);
    expect(missing.status).toBe(403);
    expect(JSON.parse(missing.body)).toEqual({ sandboxId: closed!.sandboxId, code: 403, message: "Sandbox is secured with traffic access token. Token header 'e2b-traffic-access-token' is missing" });
    const wrong = await get('/index.html', { ...to, 'e2b-traffic-access-token': `${token}x` });
    expect(wrong.status).toBe(403);
    expect(JSON.parse(wrong.body).message).toMatch(/Provided token in header 'e2b-traffic-access-token' is invalid/);
    // The other sandbox's token opens nothing here.
    expect((await get('/index.html', { host: closed!.getHost(8000), 'e2b-traffic-access-token': 'not-this-one' })).status).toBe(403);
    expect(await get('/index.html', { ...to, 'e2b-traffic-access-token': token! })).toEqual({ status: 200, body: 'only with the token' });
    expect(await get('/index.html', { host: closed!.getHost(8000), 'e2b-traffic-access-token': token! })).toEqual({ status: 200, body: 'only with the token' });
    await expect(upgrade({ host: closed!.getHost(8001) })).rejects.toThrow(/403/);
    expect(await echo(await upgrade({ host: closed!.getHost(8001), 'e2b-traffic-access-token': token! }), 'tok')).toBe('TOK');
    // envd has its own token: the SDK works as before, and the sandbox says its ports are not public.
    expect((await closed!.commands.run('echo ok')).stdout).toBe('ok\n');
    expect((await closed!.getInfo()).network?.allowPublicTraffic).toBe(false);
    // The public one is public.
    expect((await get('/index.html', { 'e2b-sandbox-id': sbx!.sandboxId, 'e2b-sandbox-port': '8000' })).status).toBe(200);
  });

  it('passes upgrades by header and by Host', async () => {
    expect(await echo(await upgrade({ 'e2b-sandbox-id': sbx!.sandboxId, 'e2b-sandbox-port': '8001' }), 'ping')).toBe('PING');
    expect(await echo(await upgrade({ host: sbx!.getHost(8001) }), 'pong')).toBe('PONG');
  });
});

/** No progress for this long fails a streaming check (the proxy holding something back hangs it). */
const STALL_MS = 30_000;

/**
 * GETs `path` (the event server: event i is sent once /tmp/<run>-go-<i> exists) and says what the
 * client saw, in order. It releases event 1 only when the headers came, and event i+1 only when
 * event i came: a proxy holding headers or events back never gets the next one released.
 */
function watchEvents(run: string, path: string, headers: IncomingHttpHeaders): Promise<string[]> {
  const release = (i: number) => sbx!.files.write(`/tmp/${run}-go-${i}`, '');
  const u = new URL(d.url);
  return new Promise((resolve, reject) => {
    const seen: string[] = [];
    const req = request({ host: u.hostname, port: u.port, path, headers }, (res) => {
      seen.push(`headers ${res.statusCode} ${res.headers['content-type']}`);
      release(1).catch(reject);
      let buf = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => {
        buf += chunk;
        for (let end = buf.indexOf('\n\n'); end >= 0; end = buf.indexOf('\n\n')) {
          const data = buf.slice(0, end).split('\n').find((l) => l.startsWith('data: '));
          buf = buf.slice(end + 2);
          seen.push(data?.slice('data: '.length) ?? '?');
          const n = seen.length - 1;
          if (n < 3) release(n + 1).catch(reject);
        }
      });
      res.on('end', () => resolve(seen));
      res.on('error', reject);
    });
    req.setTimeout(STALL_MS, () => req.destroy(new Error(`nothing new for ${STALL_MS / 1000} s; the client saw ${JSON.stringify(seen)}`)));
    req.on('error', reject);
    req.end();
  });
}

interface Frame {
  op: number;
  text: string;
}

/** A WebSocket client over a raw upgrade (RFC 6455): the handshake checked, frames sent masked. */
async function websocket(headers: IncomingHttpHeaders): Promise<{ send(op: number, text: string): void; next(): Promise<Frame>; socket: Socket }> {
  const key = randomBytes(16).toString('base64');
  const accept = createHash('sha1').update(`${key}258EAFA5-E914-47DA-95CA-C5AB0DC85B11`).digest('base64');
  const u = new URL(d.url);
  const { socket, head } = await new Promise<{ socket: Socket; head: Buffer }>((resolve, reject) => {
    const req = request({ host: u.hostname, port: u.port, path: '/ws', headers: { connection: 'Upgrade', upgrade: 'websocket', 'sec-websocket-key': key, 'sec-websocket-version': '13', ...headers } });
    req.on('upgrade', (res, s, h) => {
      if (res.headers['sec-websocket-accept'] !== accept) reject(new Error(`bad Sec-WebSocket-Accept ${res.headers['sec-websocket-accept']}`));
      else resolve({ socket: s, head: h });
    });
    req.on('response', (res) => reject(new Error(`no upgrade: HTTP ${res.statusCode}`)));
    req.setTimeout(STALL_MS, () => req.destroy(new Error('no upgrade answer')));
    req.on('error', reject);
    req.end();
  });
  let buf = head;
  const frames: Frame[] = [];
  const waiting: ((f: Frame) => void)[] = [];
  const deliver = (f: Frame) => (waiting.length > 0 ? waiting.shift()!(f) : frames.push(f));
  // Frames from the server, unmasked; the first may have come with the 101 (`head`).
  const parse = () => {
    for (;;) {
      if (buf.length < 2) return;
      let n = buf[1]! & 0x7f;
      let at = 2;
      if (n === 126) {
        if (buf.length < 4) return;
        n = buf.readUInt16BE(2);
        at = 4;
      }
      if (buf.length < at + n) return;
      deliver({ op: buf[0]! & 0x0f, text: buf.subarray(at, at + n).toString() });
      buf = buf.subarray(at + n);
    }
  };
  parse();
  socket.on('data', (b: Buffer) => {
    buf = Buffer.concat([buf, b]);
    parse();
  });
  return {
    socket,
    send(op, text) {
      const data = Buffer.from(text);
      if (data.length >= 126) throw new Error('short frames only');
      const mask = randomBytes(4);
      socket.write(Buffer.concat([Buffer.from([0x80 | op, 0x80 | data.length]), mask, data.map((x, i) => x ^ mask[i % 4]!)]));
    },
    next: () =>
      frames.length > 0
        ? Promise.resolve(frames.shift()!)
        : new Promise<Frame>((resolve, reject) => {
            const t = setTimeout(() => reject(new Error(`no frame for ${STALL_MS / 1000} s`)), STALL_MS);
            waiting.push((f) => {
              clearTimeout(t);
              resolve(f);
            });
          }),
  };
}

describe('streams through the port proxy', () => {
  it.each([
    ['close-delimited', ''],
    ['chunked', '?chunked'],
  ])('sends the headers before the first event, then each event as it comes (%s)', async (name, query) => {
    // Event 1 is sent only after the client saw the headers: headers held until the first body byte never come.
    const byHeader = await watchEvents(`h-${name}`, `/events/h-${name}${query}`, { 'e2b-sandbox-id': sbx!.sandboxId, 'e2b-sandbox-port': '8002' });
    expect(byHeader).toEqual(['headers 200 text/event-stream', 'event 1', 'event 2', 'event 3']);
    const byHost = await watchEvents(`n-${name}`, `/events/n-${name}${query}`, { host: sbx!.getHost(8002) });
    expect(byHost).toEqual(['headers 200 text/event-stream', 'event 1', 'event 2', 'event 3']);
  });

  it('passes a WebSocket: the handshake, a frame the server sends first, echoes, ping and close', async () => {
    for (const headers of [{ 'e2b-sandbox-id': sbx!.sandboxId, 'e2b-sandbox-port': '8003' }, { host: sbx!.getHost(8003) }]) {
      const ws = await websocket(headers);
      try {
        expect(await ws.next()).toEqual({ op: 1, text: 'hello' });
        for (const word of ['one', 'two', 'three']) {
          ws.send(1, word);
          expect(await ws.next()).toEqual({ op: 1, text: word.toUpperCase() });
        }
        ws.send(9, 'are you there');
        expect(await ws.next()).toEqual({ op: 10, text: 'are you there' });
        ws.send(8, '');
        expect((await ws.next()).op).toBe(8);
      } finally {
        ws.socket.destroy();
      }
    }
  });
});
