// Port routing: a server started inside the sandbox answers through E2b-Sandbox-Port and
// through Host <port>-<sandboxID>.<domain> (sandbox.getHost), plain HTTP and upgrades.
import type { IncomingHttpHeaders } from 'node:http';
import { Sandbox } from 'e2b';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startDaemon, type TestDaemon } from '../helpers/daemon.js';
import { echo, get as getFrom, startPortServers, upgrade as upgradeTo } from '../helpers/sandbox-ports.js';

const DOMAIN = 'sbx.test';
let d: TestDaemon;
let sbx: Sandbox | undefined;

const get = (path: string, headers: IncomingHttpHeaders) => getFrom(d.url, path, headers);
const upgrade = (headers: IncomingHttpHeaders) => upgradeTo(d.url, headers);

beforeAll(async () => {
  d = await startDaemon({ args: ['--sandbox-domain', DOMAIN] });
  sbx = await Sandbox.create({ apiKey: d.apiKey, apiUrl: d.url, sandboxUrl: d.url });
  await startPortServers(sbx, 'hello from the sandbox');
}, 180_000);

afterAll(async () => {
  try {
    await sbx?.kill();
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

  it('passes upgrades by header and by Host', async () => {
    expect(await echo(await upgrade({ 'e2b-sandbox-id': sbx!.sandboxId, 'e2b-sandbox-port': '8001' }), 'ping')).toBe('PING');
    expect(await echo(await upgrade({ host: sbx!.getHost(8001) }), 'pong')).toBe('PONG');
  });
});
