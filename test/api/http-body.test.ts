// Request bodies (src/http.ts readBody/readJson), read from the stream's events: whole bodies in
// any number of chunks, the size limit, and a client that goes away mid-body (an error, not a hang).
import { createServer, request, type IncomingMessage, type Server } from 'node:http';
import { afterEach, describe, expect, it } from 'vitest';
import { readBody, readJson } from '../../src/http.js';

let server: Server | undefined;

afterEach(async () => {
  server?.closeAllConnections();
  await new Promise((r) => server?.close(r) ?? r(undefined));
  server = undefined;
});

/** A server whose one request is handed to `read`; resolves with what it returned or threw. */
async function serve(read: (req: IncomingMessage) => Promise<unknown>): Promise<{ port: number; outcome: Promise<unknown> }> {
  let done!: (v: unknown) => void;
  const outcome = new Promise<unknown>((r) => (done = r));
  server = createServer((req, res) => {
    read(req).then(
      (v) => {
        done(v);
        res.end('ok');
      },
      (e: unknown) => {
        done(e);
        if (!res.destroyed) res.end('error');
      },
    );
  });
  await new Promise<void>((r) => server!.listen(0, '127.0.0.1', r));
  return { port: (server.address() as { port: number }).port, outcome };
}

describe('request bodies', () => {
  it('a JSON body sent in several chunks is parsed whole; an empty body is {}', async () => {
    const { port, outcome } = await serve((req) => readJson(req));
    const req = request({ port, host: '127.0.0.1', method: 'POST', headers: { 'transfer-encoding': 'chunked' } });
    req.on('error', () => undefined);
    for (const part of ['{"templ', 'ateID":"ho', 'st","timeout":5}']) req.write(part);
    req.end();
    expect(await outcome).toEqual({ templateID: 'host', timeout: 5 });
    const empty = await serve((r) => readJson(r));
    request({ port: empty.port, host: '127.0.0.1', method: 'POST' })
      .on('error', () => undefined)
      .end();
    expect(await empty.outcome).toEqual({});
  });

  it('a body over the limit is refused with 130400 BAD_REQUEST', async () => {
    const { port, outcome } = await serve((req) => readBody(req, 10));
    request({ port, host: '127.0.0.1', method: 'POST' })
      .on('error', () => undefined)
      .end('x'.repeat(100));
    expect(await outcome).toMatchObject({ kind: 'BAD_REQUEST', message: expect.stringContaining('larger than 10 bytes') });
  });

  it('a client that goes away before its body ended: the read fails instead of waiting for good', async () => {
    const { port, outcome } = await serve((req) => readBody(req));
    const req = request({ port, host: '127.0.0.1', method: 'POST', headers: { 'content-length': 100 } });
    req.on('error', () => undefined);
    req.write('partial', () => setTimeout(() => req.destroy(), 50));
    expect(await outcome).toBeInstanceOf(Error);
  });
});
