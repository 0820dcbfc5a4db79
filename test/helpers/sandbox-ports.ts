// Port routing checks shared by the single-daemon and cluster tests: servers to run inside a
// sandbox, and a client for plain requests and upgrades against an API base URL.
import { request, type IncomingHttpHeaders } from 'node:http';
import type { Socket } from 'node:net';
import type { Sandbox } from 'e2b';

/** Python: listen on `port`, then a loop whose body (indented 4) has the accepted connection as `c`. */
const acceptLoop = (port: number) => `s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(('0.0.0.0', ${port}))
s.listen(16)
while True:
    c, _ = s.accept()`;

/**
 * Answers an upgrade with 101, then echoes what it gets in upper case: enough to see bytes
 * cross the spliced connection both ways. Python: `python3 upgrade_echo.py`.
 */
const UPGRADE_ECHO = `
import socket
${acceptLoop(8001)}
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

/**
 * On 8002: GET /events/<run>[?chunked] answers its headers at once, then sends three server-sent
 * events, event i only once the file /tmp/<run>-go-<i> exists (so nothing can be sent before the
 * client has said it saw the headers, or the event before). `?chunked`: HTTP/1.1 chunks, else the
 * body ends with the connection.
 */
const EVENTS = `
import os, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

class H(BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'
    def log_message(self, *a):
        pass
    def do_GET(self):
        run = self.path.split('?')[0].split('/')[-1]
        chunked = self.path.endswith('?chunked')
        self.send_response(200)
        self.send_header('Content-Type', 'text/event-stream')
        self.send_header('Cache-Control', 'no-cache')
        self.send_header('Transfer-Encoding' if chunked else 'Connection', 'chunked' if chunked else 'close')
        self.end_headers()
        for i in (1, 2, 3):
            while not os.path.exists('/tmp/%s-go-%d' % (run, i)):
                time.sleep(0.02)
            ev = ('id: %d\\ndata: event %d\\n\\n' % (i, i)).encode()
            self.wfile.write(b'%x\\r\\n%s\\r\\n' % (len(ev), ev) if chunked else ev)
        if chunked:
            self.wfile.write(b'0\\r\\n\\r\\n')
        self.close_connection = True

s = ThreadingHTTPServer(('0.0.0.0', 8002), H)
s.daemon_threads = True
s.serve_forever()
`;

/**
 * On 8003: a WebSocket server (RFC 6455, by hand: the template has no websocket package). It sends
 * a text frame "hello" right after the 101, then answers each text frame with its text upper-cased,
 * a ping with a pong and a close with a close.
 */
const WEBSOCKET_ECHO = `
import base64, hashlib, socket, struct, threading

GUID = b'258EAFA5-E914-47DA-95CA-C5AB0DC85B11'

def frame(op, data):
    n = len(data)
    if n < 126:
        head = struct.pack('!BB', 0x80 | op, n)
    elif n < 65536:
        head = struct.pack('!BBH', 0x80 | op, 126, n)
    else:
        head = struct.pack('!BBQ', 0x80 | op, 127, n)
    return head + data

def exact(f, n):
    b = f.read(n)
    if len(b) != n:
        raise EOFError
    return b

def serve(c):
    f = c.makefile('rb')
    try:
        key = None
        while True:
            line = f.readline()
            if line in (b'\\r\\n', b''):
                break
            name, _, value = line.partition(b':')
            if name.strip().lower() == b'sec-websocket-key':
                key = value.strip()
        if key is None:
            c.sendall(b'HTTP/1.1 400 Bad Request\\r\\nContent-Length: 0\\r\\n\\r\\n')
            return
        accept = base64.b64encode(hashlib.sha1(key + GUID).digest())
        c.sendall(b'HTTP/1.1 101 Switching Protocols\\r\\nUpgrade: websocket\\r\\nConnection: Upgrade\\r\\nSec-WebSocket-Accept: ' + accept + b'\\r\\n\\r\\n' + frame(1, b'hello'))
        while True:
            b0, b1 = exact(f, 2)
            op, n = b0 & 0x0F, b1 & 0x7F
            if n == 126:
                n = struct.unpack('!H', exact(f, 2))[0]
            elif n == 127:
                n = struct.unpack('!Q', exact(f, 8))[0]
            mask = exact(f, 4) if b1 & 0x80 else b'\\0\\0\\0\\0'
            data = bytes(x ^ mask[i % 4] for i, x in enumerate(exact(f, n)))
            if op == 8:
                c.sendall(frame(8, data))
                return
            c.sendall(frame(10, data) if op == 9 else frame(op, data.upper()))
    except (EOFError, OSError):
        pass
    finally:
        c.close()

${acceptLoop(8003)}
    threading.Thread(target=serve, args=(c,), daemon=True).start()
`;

/** Starts the event server (8002) and the WebSocket server (8003) in the sandbox; returns once both listen. */
export async function startStreamServers(sbx: Sandbox): Promise<void> {
  await sbx.files.write('events.py', EVENTS);
  await sbx.files.write('websocket_echo.py', WEBSOCKET_ECHO);
  await sbx.commands.run('exec python3 events.py', { background: true, timeoutMs: 0 });
  await sbx.commands.run('exec python3 websocket_echo.py', { background: true, timeoutMs: 0 });
  await sbx.commands.run(`${waitPort(8002)} && ${waitPort(8003)}`, { timeoutMs: 120_000 });
}
