// Port routing: a server started inside the sandbox answers through E2b-Sandbox-Port and
// through Host <port>-<sandboxID>.<domain> (sandbox.getHost), plain HTTP and upgrades, and
// streams pass as they come: headers before the first body byte, each event, each frame. The
// daemon answers DNS for the domain itself (api.dns), so getHost names resolve through it.
import { Resolver } from 'node:dns/promises';
import type { IncomingHttpHeaders } from 'node:http';
import { Sandbox } from 'e2b';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freeUdpPort, startDaemon, type TestDaemon } from '../helpers/daemon.js';
import {
  echo,
  get as getFrom,
  startPortServers,
  startStreamServers,
  upgrade as upgradeTo,
  watchEvents,
  websocketConversation,
} from '../helpers/sandbox-ports.js';

const DOMAIN = 'sbx.test';
let d: TestDaemon;
let dnsPort: number;
let sbx: Sandbox | undefined;
/** Created with network.allowPublicTraffic false: its ports need its traffic access token. */
let closed: Sandbox | undefined;

const get = (path: string, headers: IncomingHttpHeaders) => getFrom(d.url, path, headers);
const upgrade = (headers: IncomingHttpHeaders) => upgradeTo(d.url, headers);

beforeAll(async () => {
  dnsPort = await freeUdpPort();
  d = await startDaemon({ args: ['--sandbox-domain', DOMAIN], master: { api: { dns: { listen: `127.0.0.1:${dnsPort}` } } } });
  const opts = { apiKey: d.apiKey, apiUrl: d.url, sandboxUrl: d.url };
  // Each kept as soon as it exists, so afterAll removes it even when the other create failed.
  await Promise.all([
    Sandbox.create(opts).then((s) => (sbx = s)),
    Sandbox.create({ ...opts, network: { allowPublicTraffic: false } }).then((s) => (closed = s)),
  ]);
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
    expect(JSON.parse(missing.body)).toEqual({
      sandboxId: closed!.sandboxId,
      code: 403,
      message: "Sandbox is secured with traffic access token. Token header 'e2b-traffic-access-token' is missing",
    });
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

describe('DNS for getHost names (api.dns)', () => {
  const resolver = () => {
    const r = new Resolver({ timeout: 3000, tries: 2 });
    r.setServers([`127.0.0.1:${dnsPort}`]);
    return r;
  };

  it("resolves sbx.getHost(port) to the daemon's address, and that address with that Host reaches the sandbox's server", async () => {
    const host = sbx!.getHost(8000);
    const [address] = await resolver().resolve4(host);
    expect(address).toBe('127.0.0.1');
    const port = new URL(d.url).port;
    expect(await getFrom(`http://${address}:${port}`, '/index.html', { host: `${host}:${port}` })).toEqual({ status: 200, body: 'hello from the sandbox' });
  });

  it('NXDOMAIN under the domain, NODATA for AAAA (no IPv6 answer), REFUSED elsewhere; counted by rcode in /metrics', async () => {
    const r = resolver();
    expect(await r.resolve4(DOMAIN.toUpperCase())).toEqual(['127.0.0.1']);
    await expect(r.resolve4(`www.${DOMAIN}`)).rejects.toMatchObject({ code: 'ENOTFOUND' });
    await expect(r.resolve6(sbx!.getHost(8000))).rejects.toMatchObject({ code: 'ENODATA' });
    await expect(r.resolve4('example.com')).rejects.toMatchObject({ code: 'EREFUSED' });
    const text = await (await fetch(`${d.url}/metrics`)).text();
    const count = (rcode: string) => Number(new RegExp(`^cubed_dns_queries_total\\{rcode="${rcode}"\\} (\\d+)$`, 'm').exec(text)?.[1]);
    for (const rcode of ['NOERROR', 'NXDOMAIN', 'REFUSED']) expect(count(rcode)).toBeGreaterThanOrEqual(1);
    expect(count('FORMERR')).toBe(0);
  });
});

describe('streams through the port proxy', () => {
  it.each([
    ['close-delimited', ''],
    ['chunked', '?chunked'],
  ])('sends the headers before the first event, then each event as it comes (%s)', async (name, query) => {
    // Event 1 is sent only after the client saw the headers: headers held until the first body byte never come.
    const byHeader = await watchEvents(d.url, sbx!, `h-${name}`, `/events/h-${name}${query}`, { 'e2b-sandbox-id': sbx!.sandboxId, 'e2b-sandbox-port': '8002' });
    expect(byHeader).toEqual(['headers 200 text/event-stream', 'event 1', 'event 2', 'event 3']);
    const byHost = await watchEvents(d.url, sbx!, `n-${name}`, `/events/n-${name}${query}`, { host: sbx!.getHost(8002) });
    expect(byHost).toEqual(['headers 200 text/event-stream', 'event 1', 'event 2', 'event 3']);
  });

  it('passes a WebSocket: the handshake, a frame the server sends first, echoes, ping and close', async () => {
    for (const headers of [{ 'e2b-sandbox-id': sbx!.sandboxId, 'e2b-sandbox-port': '8003' }, { host: sbx!.getHost(8003) }]) {
      await websocketConversation(d.url, headers);
    }
  });
});
