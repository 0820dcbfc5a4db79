// cubectl's client with several control URLs (comma-separated, as `cubed --control` takes them):
// a replica that does not answer is skipped, reads and never-sent writes go to the next one,
// and the one that answered is tried first afterwards. Real HTTP servers on loopback.
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { controlUrls, CubeClient, DaemonUnreachableError } from '../../src/cli/client.js';

let up: Server;
let upURL: string;
let deadURL: string;
const seen: string[] = [];

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
});

afterAll(async () => {
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
});
