// `cubectl bench --api A,B`: the benchmark's E2B client over several control replicas (every
// call threw a TypeError: the list was taken for one URL). Calls go round the replicas; one that
// refuses connections passes its calls on. Real HTTP servers on loopback standing for replicas.
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { E2bHttp } from '../../src/bench/e2b-http.js';

const servers: Server[] = [];
const seen: string[][] = [[], []];
const urls: string[] = [];
let deadURL: string;

beforeAll(async () => {
  for (const i of [0, 1]) {
    const s = createServer((req, res) => {
      seen[i]!.push(`${req.method} ${req.url}`);
      res.writeHead(req.method === 'POST' ? 201 : 204, { 'content-type': 'application/json' });
      res.end(req.method === 'POST' ? JSON.stringify({ sandboxID: `sbx-${i}` }) : undefined);
    });
    await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
    servers.push(s);
    urls.push(`http://127.0.0.1:${(s.address() as AddressInfo).port}`);
  }
  const gone = createServer();
  await new Promise<void>((r) => gone.listen(0, '127.0.0.1', r));
  deadURL = `http://127.0.0.1:${(gone.address() as AddressInfo).port}`;
  await new Promise((r) => gone.close(r));
});

afterAll(async () => {
  for (const s of servers) await new Promise((r) => s.close(r));
});

it('goes round the replicas of --api A,B, and past one that refuses connections', async () => {
  const http = new E2bHttp({ apiUrl: `${urls[0]}, ${urls[1]}`, apiKey: 'k' });
  const made = [await http.create({ templateID: 'base' }), await http.create({ templateID: 'base' })];
  expect(made.map((m) => m.sandboxID).sort()).toEqual(['sbx-0', 'sbx-1']);
  await http.kill('sbx-0');
  await http.kill('sbx-1');
  expect(seen.map((s) => s.length)).toEqual([2, 2]);
  const past = new E2bHttp({ apiUrl: `${deadURL},${urls[1]}`, apiKey: 'k' });
  for (let i = 0; i < 3; i++) expect((await past.create({ templateID: 'base' })).sandboxID).toBe('sbx-1');
});
