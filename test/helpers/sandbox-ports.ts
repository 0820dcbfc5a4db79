// Port routing checks shared by the single-daemon and cluster tests: servers to run inside a
// sandbox, and a client for plain requests and upgrades against an API base URL.
import { request, type IncomingHttpHeaders } from 'node:http';
import type { Socket } from 'node:net';
import type { Sandbox } from 'e2b';

/**
 * Answers an upgrade with 101, then echoes what it gets in upper case: enough to see bytes
 * cross the spliced connection both ways. Python: `python3 upgrade_echo.py`.
 */
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

export function get(base: string, path: string, headers: IncomingHttpHeaders): Promise<{ status: number; body: string }> {
  const u = new URL(base);
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

export function upgrade(base: string, headers: IncomingHttpHeaders): Promise<Socket> {
  const u = new URL(base);
  return new Promise((resolve, reject) => {
    const req = request({ host: u.hostname, port: u.port, path: '/ws', headers: { connection: 'Upgrade', upgrade: 'echo', ...headers } });
    req.on('upgrade', (_res, socket) => resolve(socket));
    req.on('response', (res) => reject(new Error(`no upgrade: HTTP ${res.statusCode}`)));
    req.on('error', reject);
    req.end();
  });
}

export async function echo(socket: Socket, text: string): Promise<string> {
  socket.write(text);
  const got = await new Promise<string>((resolve) => socket.once('data', (b: Buffer) => resolve(b.toString())));
  socket.destroy();
  return got;
}

/** Starts, in the sandbox, a static web server on 8000 serving `index` as /index.html and the upgrade echo on 8001; returns once both listen. */
export async function startPortServers(sbx: Sandbox, index: string): Promise<void> {
  await sbx.files.write('www/index.html', index);
  await sbx.files.write('upgrade_echo.py', UPGRADE_ECHO);
  await sbx.commands.run('cd www && exec python3 -m http.server 8000', { background: true, timeoutMs: 0 });
  await sbx.commands.run('exec python3 upgrade_echo.py', { background: true, timeoutMs: 0 });
  await sbx.commands.run(`${waitPort(8000)} && ${waitPort(8001)}`, { timeoutMs: 120_000 });
}
