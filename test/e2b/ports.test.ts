// Port routing: a server started inside the sandbox answers through E2b-Sandbox-Port and
// through Host <port>-<sandboxID>.<domain> (sandbox.getHost), plain HTTP and upgrades.
import { request, type IncomingHttpHeaders } from 'node:http';
import type { Socket } from 'node:net';
import { Sandbox } from 'e2b';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startDaemon, type TestDaemon } from '../helpers/daemon.js';

const DOMAIN = 'sbx.test';
let d: TestDaemon;
let sbx: Sandbox | undefined;

// Answers an upgrade with 101, then echoes what it gets in upper case: enough to see bytes
// cross the spliced connection both ways.
const UPGRADE_ECHO = `
import socket
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(('0.0.0.0', 8001))
s.listen(4)
while True:
    c, _ = s.accept()
    d = b''
    while b'\\r\\n\\r\\n' not in d:
        d += c.recv(4096)
    c.sendall(b'HTTP/1.1 101 Switching Protocols\\r\\nUpgrade: echo\\r\\nConnection: Upgrade\\r\\n\\r\\n')
    while True:
        x = c.recv(4096)
        if not x:
            break
        c.sendall(x.upper())
    c.close()
`;

/** Waits inside the sandbox until something listens on the port (python starts slowly on a busy host). */
const waitPort = (port: number) => `for i in $(seq 1 240); do (exec 3<>/dev/tcp/127.0.0.1/${port}) 2>/dev/null && exit 0; sleep 0.25; done; exit 1`;

function get(path: string, headers: IncomingHttpHeaders): Promise<{ status: number; body: string }> {
  const u = new URL(d.url);
  return new Promise((resolve, reject) => {
    request({ host: u.hostname, port: u.port, path, headers }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (body += c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    })
      .on('error', reject)
      .end();
  });
}

function upgrade(headers: IncomingHttpHeaders): Promise<Socket> {
  const u = new URL(d.url);
  return new Promise((resolve, reject) => {
    const req = request({ host: u.hostname, port: u.port, path: '/ws', headers: { connection: 'Upgrade', upgrade: 'echo', ...headers } });
    req.on('upgrade', (_res, socket) => resolve(socket));
    req.on('response', (res) => reject(new Error(`no upgrade: HTTP ${res.statusCode}`)));
    req.on('error', reject);
    req.end();
  });
}

async function echo(socket: Socket, text: string): Promise<string> {
  socket.write(text);
  const got = await new Promise<string>((resolve) => socket.once('data', (b: Buffer) => resolve(b.toString())));
  socket.destroy();
  return got;
}

beforeAll(async () => {
  d = await startDaemon({ args: ['--sandbox-domain', DOMAIN] });
  sbx = await Sandbox.create({ apiKey: d.apiKey, apiUrl: d.url, sandboxUrl: d.url });
  await sbx.files.write('www/index.html', 'hello from the sandbox');
  await sbx.files.write('upgrade_echo.py', UPGRADE_ECHO);
  await sbx.commands.run('cd www && exec python3 -m http.server 8000', { background: true, timeoutMs: 0 });
  await sbx.commands.run('exec python3 upgrade_echo.py', { background: true, timeoutMs: 0 });
  await sbx.commands.run(`${waitPort(8000)} && ${waitPort(8001)}`, { timeoutMs: 120_000 });
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
