// Port routing: requests for a sandbox port other than envd's (a web server the agent
// started, a Jupyter gateway) are forwarded to that port of the sandbox's own address,
// plain HTTP and WebSocket upgrades alike.
import { STATUS_CODES, request, type IncomingHttpHeaders, type IncomingMessage, type ServerResponse } from 'node:http';
import { connect, type Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { errorBody, CubeError } from '../errors.js';

/** Hop-by-hop headers (RFC 9110 §7.6.1) and our routing headers stay on this side. */
const DROP = new Set(['connection', 'keep-alive', 'proxy-connection', 'transfer-encoding', 'te', 'trailer', 'upgrade', 'e2b-sandbox-id', 'e2b-sandbox-port', 'x-access-token']);

export function forwardHeaders(h: IncomingHttpHeaders): IncomingHttpHeaders {
  const out: IncomingHttpHeaders = {};
  for (const [k, v] of Object.entries(h)) if (!DROP.has(k) && v !== undefined) out[k] = v;
  return out;
}

function unreachable(sandboxID: string, port: number, e: Error): CubeError {
  return new CubeError('NODE_UNREACHABLE', `sandbox ${sandboxID} has nothing listening on port ${port}: ${e.message}`, { details: { sandboxID, port } });
}

const badGatewayBody = (err: CubeError): object => ({ ...errorBody(err, 'e2b'), code: 502 });

/** 502 JSON body like E2B's proxy ({code: 502, message}) when the port is closed. */
function badGateway(res: ServerResponse, err: CubeError): void {
  if (res.headersSent) {
    res.destroy(err);
    return;
  }
  const body = JSON.stringify(badGatewayBody(err));
  res.writeHead(502, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
  res.end(body);
}

export function proxyHttp(req: IncomingMessage, res: ServerResponse, sandboxID: string, address: string, port: number): Promise<void> {
  return new Promise((resolve) => {
    const up = request({ host: address, port, method: req.method, path: req.url, headers: forwardHeaders(req.headers) }, (upRes) => {
      const headers = forwardHeaders(upRes.headers);
      res.writeHead(upRes.statusCode ?? 502, upRes.statusMessage, headers);
      upRes.pipe(res);
      upRes.on('end', resolve);
      upRes.on('error', () => {
        res.destroy();
        resolve();
      });
    });
    up.on('error', (e) => {
      badGateway(res, unreachable(sandboxID, port, e));
      resolve();
    });
    res.on('close', () => up.destroy());
    req.pipe(up);
  });
}

/** Replays the upgrade request on a fresh connection to the sandbox port, then splices the two sockets. */
export function proxyUpgrade(req: IncomingMessage, socket: Duplex, head: Buffer, sandboxID: string, address: string, port: number): void {
  const up: Socket = connect({ host: address, port });
  const lines = [`${req.method} ${req.url} HTTP/1.1`];
  for (let i = 0; i < req.rawHeaders.length; i += 2) {
    const name = req.rawHeaders[i]!;
    const lower = name.toLowerCase();
    if (lower === 'e2b-sandbox-id' || lower === 'e2b-sandbox-port' || lower === 'x-access-token') continue;
    lines.push(`${name}: ${req.rawHeaders[i + 1]}`);
  }
  let connected = false;
  up.once('connect', () => {
    connected = true;
    up.write(lines.join('\r\n') + '\r\n\r\n');
    if (head.length > 0) up.write(head);
    up.pipe(socket);
    socket.pipe(up);
  });
  up.on('error', (e) => {
    if (!connected) rejectUpgrade(socket, 502, badGatewayBody(unreachable(sandboxID, port, e)));
    else socket.destroy();
  });
  socket.on('error', () => up.destroy());
  socket.on('close', () => up.destroy());
  up.on('close', () => socket.destroy());
}

/** Answers an upgrade request that will not be served, on the raw socket. */
export function rejectUpgrade(socket: Duplex, status: number, body: object): void {
  const text = JSON.stringify(body);
  if (socket.writable) {
    socket.end(`HTTP/1.1 ${status} ${STATUS_CODES[status] ?? ''}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(text)}\r\nconnection: close\r\n\r\n${text}`);
  } else socket.destroy();
}
