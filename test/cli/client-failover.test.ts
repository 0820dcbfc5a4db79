// cubectl's client with several control URLs (comma-separated, as `cubed --control` takes them):
// a replica that does not answer is skipped, reads and never-sent writes go to the next one,
// and the one that answered is tried first afterwards. A frozen replica (it accepts connections
// and never answers, as a SIGSTOPped one does) costs a request timeout, then reads and idempotent
// changes go to the next; a create is not sent twice. Real HTTP servers on loopback.
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { controlUrls, CubeClient, DaemonUnreachableError } from '../../src/cli/client.js';
import { assertBuilt, cubectl } from './run-cli.js';

let up: Server;
let upURL: string;
let deadURL: string;
let frozen: Server;
let frozenURL: string;
const seen: string[] = [];
const frozenSeen: string[] = [];

beforeAll(async () => {
  up = createServer((req, res) => {
    seen.push(`${req.method} ${req.url}`);
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(req.method === 'POST' ? JSON.stringify({ sandboxID: 'sbx1' }) : '[]');
  });
  await new Promise<void>((r) => up.listen(0, '127.0.0.1', r));
  upURL = `http://127.0.0.1:${(up.address() as AddressInfo).port}`;
  // A port that was just free: connection refused, as a dead replica's.
  const gone = createServer();
  await new Promise<void>((r) => gone.listen(0, '127.0.0.1', r));
  deadURL = `http://127.0.0.1:${(gone.address() as AddressInfo).port}`;
  await new Promise((r) => gone.close(r));
  // Takes the connection and the request, never answers.
  frozen = createServer((req) => frozenSeen.push(`${req.method} ${req.url}`));
  await new Promise<void>((r) => frozen.listen(0, '127.0.0.1', r));
  frozenURL = `http://127.0.0.1:${(frozen.address() as AddressInfo).port}`;
});

afterAll(async () => {
  frozen.closeAllConnections();
  await new Promise((r) => frozen.close(r));
  await new Promise((r) => up.close(r));
});

describe('CubeClient with several control URLs', () => {
  it('parses a comma-separated list', () => {
    expect(controlUrls(' http://a:3000/, http://b:3000 ,,')).toEqual(['http://a:3000', 'http://b:3000']);
  });

  it('skips a replica that refuses the connection, for reads and writes, and sticks to the one that answered', async () => {
    const c = new CubeClient({ baseUrl: `${deadURL},${upURL}` });
    expect(c.baseUrl).toBe(deadURL);
    expect(await c.nodes()).toEqual([]);
    expect(c.baseUrl).toBe(upURL);
    expect(await c.createSandbox({})).toEqual({ sandboxID: 'sbx1' });
    expect(seen).toEqual(['GET /admin/v1/nodes', 'POST /admin/v1/sandboxes']);
  });

  it('names every replica when none answers', async () => {
    const c = new CubeClient({ baseUrl: `${deadURL},${deadURL}` });
    const e = await c.nodes().catch((err: unknown) => err);
    expect(e).toBeInstanceOf(DaemonUnreachableError);
    expect((e as Error).message).toBe(`cannot reach cubed at ${deadURL},${deadURL} (${deadURL}: ECONNREFUSED; ${deadURL}: ECONNREFUSED)`);
  });

  it('moves on from a frozen replica after the request timeout for reads and idempotent changes; a create it may have taken is not sent again', async () => {
    seen.length = 0;
    const c = new CubeClient({ baseUrl: `${frozenURL},${upURL}`, timeoutMs: 300 });
    expect(await c.nodes()).toEqual([]);
    expect(c.baseUrl).toBe(upURL);
    const again = new CubeClient({ baseUrl: `${frozenURL},${upURL}`, timeoutMs: 300 });
    expect(await again.cordon('n1')).toEqual({ sandboxID: 'sbx1' });
    // A POST that is not idempotent (a new key) may have been carried out: not sent to the next replica.
    const create = new CubeClient({ baseUrl: `${frozenURL},${upURL}`, timeoutMs: 300 });
    const e = await create.createKey({ name: 'k' }).catch((x: unknown) => x);
    expect(e).toBeInstanceOf(DaemonUnreachableError);
    expect((e as Error).message).toMatch(/no answer in 0\.3 s; POST \/admin\/v1\/keys may have been carried out, so it was not sent to another replica/);
    const short = new CubeClient({ baseUrl: `${frozenURL},${upURL}`, timeoutMs: 300 });
    await short.deleteSandbox('x'); // DELETE is idempotent: answered by the second replica
    expect(frozenSeen).toContain('POST /admin/v1/keys');
    expect(seen).toEqual(['GET /admin/v1/nodes', 'POST /admin/v1/nodes/n1/cordon', 'DELETE /admin/v1/sandboxes/x']);
  });

  it('cubectl nodes answers from the second replica when the first is frozen', async () => {
    assertBuilt();
    const r = await cubectl(['nodes', '--json', '--request-timeout', '1'], { CUBE_API_URL: `${frozenURL},${upURL}`, CUBE_API_KEY: 'k' });
    expect(r).toMatchObject({ code: 0, stderr: '' });
    expect(JSON.parse(r.stdout)).toEqual([]);
  });
});
