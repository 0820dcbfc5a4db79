// Port routing in a cluster: the sandbox's address is private to its compute node (a test host
// in its own network namespace), so the control replica forwards port traffic to the node's
// authenticated port proxy, which forwards to the sandbox: plain HTTP and upgrades, by
// E2b-Sandbox-Port and by Host <port>-<id>.<domain>, with the E2B SDK driving the sandbox. The
// replica answers DNS for the domain (api.dns) with its own address.
import { Resolver } from 'node:dns/promises';
import type { IncomingHttpHeaders } from 'node:http';
import { Sandbox } from 'e2b';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PROXY_SECRET_HEADER, proxyPath } from '../../src/cubelet/rpc-wire.js';
import { startCluster, type TestCluster } from '../helpers/cluster.js';
import { freeUdpPort } from '../helpers/daemon.js';
import {
  echo,
  get as getFrom,
  startPortServers,
  startStreamServers,
  upgrade as upgradeTo,
  watchEvents,
  websocketConversation,
} from '../helpers/sandbox-ports.js';

const DOMAIN = 'sbx.cluster.test';
let c: TestCluster;
let dnsPort: number;
let sbx: Sandbox | undefined;

const control = () => c.controls[0]!.url;
const get = (path: string, headers: IncomingHttpHeaders) => getFrom(control(), path, headers);
const upgrade = (headers: IncomingHttpHeaders) => upgradeTo(control(), headers);

beforeAll(async () => {
  dnsPort = await freeUdpPort();
  // Compute nodes get the same cubemaster.yaml: they serve no API and open no DNS socket.
  c = await startCluster({ computes: 1, controls: 1, master: { api: { sandbox_domain: DOMAIN, dns: { listen: `127.0.0.1:${dnsPort}` } } } });
  sbx = await Sandbox.create({ apiKey: c.apiKey, apiUrl: control(), sandboxUrl: control() });
  await Promise.all([startPortServers(sbx, 'hello from a compute node'), startStreamServers(sbx)]);
}, 240_000);

afterAll(async () => {
  try {
    await sbx?.kill();
  } finally {
    await c?.stop();
  }
}, 120_000);

describe('port proxying through the compute node', () => {
  it("proxies HTTP by E2b-Sandbox-Port and by Host, with the client's own Authorization header left to the sandbox (the node secret travels apart)", async () => {
    expect(await get('/index.html', { 'e2b-sandbox-id': sbx!.sandboxId, 'e2b-sandbox-port': '8000', authorization: 'Bearer app-token' })).toEqual({
      status: 200,
      body: 'hello from a compute node',
    });
    expect(await get('/index.html?x=1', { host: sbx!.getHost(8000) })).toEqual({ status: 200, body: 'hello from a compute node' });
  });

  it("resolves getHost names through the replica's DNS listener to the replica's address, which proxies them", async () => {
    const r = new Resolver({ timeout: 3000, tries: 2 });
    r.setServers([`127.0.0.1:${dnsPort}`]);
    const replica = new URL(control());
    expect(await r.resolve4(sbx!.getHost(8000))).toEqual([replica.hostname]);
    expect(await get('/index.html', { host: `${sbx!.getHost(8000)}:${replica.port}` })).toEqual({ status: 200, body: 'hello from a compute node' });
  });

  it('answers 502 JSON for a closed port', async () => {
    const closed = await get('/', { 'e2b-sandbox-id': sbx!.sandboxId, 'e2b-sandbox-port': '8999' });
    expect(closed.status).toBe(502);
    expect(JSON.parse(closed.body)).toMatchObject({ code: 502, message: expect.stringContaining('port 8999') });
  });

  it('passes upgrades by header and by Host', async () => {
    expect(await echo(await upgrade({ 'e2b-sandbox-id': sbx!.sandboxId, 'e2b-sandbox-port': '8001' }), 'ping')).toBe('PING');
    expect(await echo(await upgrade({ host: sbx!.getHost(8001) }), 'pong')).toBe('PONG');
  });

  it('the node port proxy refuses requests without the cluster secret, plain and upgrade', async () => {
    const node = c.computes[0]!.url;
    const path = proxyPath(sbx!.sandboxId, 8000, '/index.html');
    expect((await getFrom(node, path, {})).status).toBe(401);
    expect((await getFrom(node, path, { [PROXY_SECRET_HEADER]: 'wrong', authorization: `Bearer ${c.secret}` })).status).toBe(401);
    expect(await getFrom(node, path, { [PROXY_SECRET_HEADER]: c.secret })).toEqual({ status: 200, body: 'hello from a compute node' });
    await expect(upgradeTo(node, { host: 'x' })).rejects.toThrow(/HTTP 404/);
  });

  it('streams through both proxies as it comes: headers before the first event, each event, WebSocket frames', async () => {
    // Event 1 is sent only after the client saw the headers, event i+1 only after event i.
    const chunked = await watchEvents(control(), sbx!, 'cluster-chunked', '/events/cluster-chunked?chunked', {
      'e2b-sandbox-id': sbx!.sandboxId,
      'e2b-sandbox-port': '8002',
    });
    expect(chunked).toEqual(['headers 200 text/event-stream', 'event 1', 'event 2', 'event 3']);
    const closing = await watchEvents(control(), sbx!, 'cluster-close', '/events/cluster-close', { host: sbx!.getHost(8002) });
    expect(closing).toEqual(['headers 200 text/event-stream', 'event 1', 'event 2', 'event 3']);
    await websocketConversation(control(), { host: sbx!.getHost(8003) });
  });
});
