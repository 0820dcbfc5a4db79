// The bench's E2B REST client (node:http with a keep-alive agent): answers, and each kind of
// failure under the code a run groups it by: the server's code, unreachable, timeout.
import { createServer, type Server } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BenchOpError, E2bHttp } from '../../src/bench/e2b-http.js';
import { freePort } from '../helpers/daemon.js';

let server: Server;
let url: string;
const bodies: unknown[] = [];
let connections = 0;

beforeAll(async () => {
  server = createServer((req, res) => {
    let body = '';
    req.on('data', (c: Buffer) => (body += c.toString()));
    req.on('end', () => {
      if (req.url === '/sandboxes/silent/pause') return; // never answers
      if (req.headers['x-api-key'] !== 'k')
        return void res.writeHead(401, { 'content-type': 'application/json' }).end(JSON.stringify({ code: 401, message: 'bad key' }));
      bodies.push(body ? JSON.parse(body) : undefined);
      if (req.method === 'POST' && req.url === '/v2/sandboxes')
        return void res.writeHead(201, { 'content-type': 'application/json' }).end(JSON.stringify({ sandboxID: 'sb1', envdAccessToken: 'tok' }));
      if (req.method === 'DELETE' && req.url === '/sandboxes/gone')
        return void res
          .writeHead(404, { 'content-type': 'application/json' })
          .end(JSON.stringify({ code: 404, cubeCode: 130404, message: 'sandbox gone not found' }));
      res.writeHead(204).end();
    });
  });
  server.on('connection', () => connections++);
  await new Promise<void>((ok) => server.listen(0, '127.0.0.1', ok));
  url = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
});

afterAll(async () => {
  server.closeAllConnections();
  await new Promise((r) => server.close(r));
});

async function codeOf(p: Promise<unknown>): Promise<string> {
  try {
    await p;
    return 'ok';
  } catch (e) {
    expect(e).toBeInstanceOf(BenchOpError);
    return (e as BenchOpError).code;
  }
}

describe('E2bHttp', () => {
  it('creates over one kept-alive connection and sends the body as JSON', async () => {
    const http = new E2bHttp({ apiUrl: url, apiKey: 'k' });
    const before = connections;
    expect(await http.create({ templateID: 'host', timeout: 60 })).toEqual({ sandboxID: 'sb1', envdAccessToken: 'tok' });
    await http.kill('sb1');
    expect(bodies.slice(-2)).toEqual([{ templateID: 'host', timeout: 60 }, undefined]);
    expect(connections - before).toBe(1);
  });

  it("a refused call carries the server's code; a wrong key its HTTP status", async () => {
    expect(await codeOf(new E2bHttp({ apiUrl: url, apiKey: 'k' }).kill('gone'))).toBe('130404');
    expect(await codeOf(new E2bHttp({ apiUrl: url, apiKey: 'wrong' }).create({ templateID: 'host' }))).toBe('401');
  });

  it('no server is unreachable; no answer within timeoutMs is a timeout', async () => {
    expect(await codeOf(new E2bHttp({ apiUrl: `http://127.0.0.1:${await freePort()}`, apiKey: 'k' }).create({ templateID: 'host' }))).toBe('unreachable');
    expect(await codeOf(new E2bHttp({ apiUrl: url, apiKey: 'k', timeoutMs: 200 }).pause('silent'))).toBe('timeout');
  });
});
