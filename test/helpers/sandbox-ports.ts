// Port routing checks shared by the single-daemon and cluster tests: servers to run inside a
// sandbox, and a client for plain requests and upgrades against an API base URL.
import { createHash, randomBytes } from 'node:crypto';
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

/** No progress for this long fails a streaming check (the proxy holding something back hangs it). */
const STALL_MS = 30_000;

/**
 * GETs `path` from `base` (the event server in `sbx`: event i is sent once /tmp/<run>-go-<i> exists) and says what the
 * client saw, in order. It releases event 1 only when the headers came, and event i+1 only when
 * event i came: a proxy holding headers or events back never gets the next one released.
 */
export function watchEvents(base: string, sbx: Sandbox, run: string, path: string, headers: IncomingHttpHeaders): Promise<string[]> {
  const release = (i: number) => sbx.files.write(`/tmp/${run}-go-${i}`, '');
  const u = new URL(base);
  return new Promise((resolve, reject) => {
    const seen: string[] = [];
    const req = request({ host: u.hostname, port: u.port, path, headers }, (res) => {
      seen.push(`headers ${res.statusCode} ${res.headers['content-type']}`);
      release(1).catch(reject);
      let buf = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => {
        buf += chunk;
        for (let end = buf.indexOf('\n\n'); end >= 0; end = buf.indexOf('\n\n')) {
          const data = buf
            .slice(0, end)
            .split('\n')
            .find((l) => l.startsWith('data: '));
          buf = buf.slice(end + 2);
          seen.push(data?.slice('data: '.length) ?? '?');
          const n = seen.length - 1;
          if (n < 3) release(n + 1).catch(reject);
        }
      });
      res.on('end', () => resolve(seen));
      res.on('error', reject);
    });
    req.setTimeout(STALL_MS, () => req.destroy(new Error(`nothing new for ${STALL_MS / 1000} s; the client saw ${JSON.stringify(seen)}`)));
    req.on('error', reject);
    req.end();
  });
}

export interface Frame {
  op: number;
  text: string;
}

/** A WebSocket client over a raw upgrade (RFC 6455): the handshake checked, frames sent masked. */
export async function websocket(
  base: string,
  headers: IncomingHttpHeaders,
): Promise<{ send(op: number, text: string): void; next(): Promise<Frame>; socket: Socket }> {
  const key = randomBytes(16).toString('base64');
  const accept = createHash('sha1').update(`${key}258EAFA5-E914-47DA-95CA-C5AB0DC85B11`).digest('base64');
  const u = new URL(base);
  const { socket, head } = await new Promise<{ socket: Socket; head: Buffer }>((resolve, reject) => {
    const req = request({
      host: u.hostname,
      port: u.port,
      path: '/ws',
      headers: { connection: 'Upgrade', upgrade: 'websocket', 'sec-websocket-key': key, 'sec-websocket-version': '13', ...headers },
    });
    req.on('upgrade', (res, s, h) => {
      if (res.headers['sec-websocket-accept'] !== accept) reject(new Error(`bad Sec-WebSocket-Accept ${res.headers['sec-websocket-accept']}`));
      else resolve({ socket: s, head: h });
    });
    req.on('response', (res) => reject(new Error(`no upgrade: HTTP ${res.statusCode}`)));
    req.setTimeout(STALL_MS, () => req.destroy(new Error('no upgrade answer')));
    req.on('error', reject);
    req.end();
  });
  let buf = head;
  const frames: Frame[] = [];
  const waiting: ((f: Frame) => void)[] = [];
  const deliver = (f: Frame) => (waiting.length > 0 ? waiting.shift()!(f) : frames.push(f));
  // Frames from the server, unmasked; the first may have come with the 101 (`head`).
  const parse = () => {
    for (;;) {
      if (buf.length < 2) return;
      let n = buf[1]! & 0x7f;
      let at = 2;
      if (n === 126) {
        if (buf.length < 4) return;
        n = buf.readUInt16BE(2);
        at = 4;
      }
      if (buf.length < at + n) return;
      deliver({ op: buf[0]! & 0x0f, text: buf.subarray(at, at + n).toString() });
      buf = buf.subarray(at + n);
    }
  };
  parse();
  socket.on('data', (b: Buffer) => {
    buf = Buffer.concat([buf, b]);
    parse();
  });
  return {
    socket,
    send(op, text) {
      const data = Buffer.from(text);
      if (data.length >= 126) throw new Error('short frames only');
      const mask = randomBytes(4);
      socket.write(Buffer.concat([Buffer.from([0x80 | op, 0x80 | data.length]), mask, data.map((x, i) => x ^ mask[i % 4]!)]));
    },
    next: () =>
      frames.length > 0
        ? Promise.resolve(frames.shift()!)
        : new Promise<Frame>((resolve, reject) => {
            const t = setTimeout(() => reject(new Error(`no frame for ${STALL_MS / 1000} s`)), STALL_MS);
            waiting.push((f) => {
              clearTimeout(t);
              resolve(f);
            });
          }),
  };
}

/**
 * Through `base`, to the WebSocket server (8003) the headers name: the frame it sends first,
 * three echoes, a ping and a close, each checked. Throws what went wrong.
 */
export async function websocketConversation(base: string, headers: IncomingHttpHeaders): Promise<void> {
  const ws = await websocket(base, headers);
  try {
    const want = async (f: Frame) => {
      const got = await ws.next();
      if (got.op !== f.op || got.text !== f.text) throw new Error(`expected frame ${JSON.stringify(f)}, got ${JSON.stringify(got)}`);
    };
    await want({ op: 1, text: 'hello' });
    for (const word of ['one', 'two', 'three']) {
      ws.send(1, word);
      await want({ op: 1, text: word.toUpperCase() });
    }
    ws.send(9, 'are you there');
    await want({ op: 10, text: 'are you there' });
    ws.send(8, '');
    await want({ op: 8, text: '' });
  } finally {
    ws.socket.destroy();
  }
}
