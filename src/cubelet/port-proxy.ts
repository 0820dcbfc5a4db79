// Port routing: requests for a sandbox port other than envd's (a web server the agent
// started, a Jupyter gateway) are forwarded to that port of the sandbox's own address,
// plain HTTP and WebSocket upgrades alike. Only the sandbox's node reaches that address: a
// control replica forwards to the node's port proxy instead (NodeApi.portUpstream), and the
// node forwards from there with these same functions (so they live in the node's layer, below the API).
import { STATUS_CODES, request, type ClientRequest, type IncomingHttpHeaders, type IncomingMessage, type ServerResponse } from 'node:http';
import { connect, type Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { PROXY_SECRET_HEADER } from './rpc-wire.js';
import type { NodeApi, PortUpstream } from './types.js';
import { errorBody, CubeError } from '../errors.js';

/** Our routing headers (and the cluster secret) never reach the sandbox. */
const ROUTING = new Set(['e2b-sandbox-id', 'e2b-sandbox-port', 'x-access-token', PROXY_SECRET_HEADER]);
/** Hop-by-hop headers (RFC 9110 §7.6.1) and the routing headers stay on this side. */
const DROP = new Set(['connection', 'keep-alive', 'proxy-connection', 'transfer-encoding', 'te', 'trailer', 'upgrade', ...ROUTING]);

export function forwardHeaders(h: IncomingHttpHeaders): IncomingHttpHeaders {
  const out: IncomingHttpHeaders = {};
  for (const [k, v] of Object.entries(h)) if (!DROP.has(k) && v !== undefined) out[k] = v;
  return out;
}

/** Where `port` of the sandbox is reached from here: the node's port proxy when it has one, else the sandbox address. */
export async function upstreamOf(node: NodeApi, sandboxID: string, port: number, path: string): Promise<PortUpstream> {
  if (node.portUpstream) return node.portUpstream(sandboxID, port, path);
  return { host: await node.sandboxAddress(sandboxID), port, path, headers: {} };
}

/** @e2b/code-interpreter's port: nothing there usually means the sandbox is not from that template. */
const CODE_INTERPRETER_PORT = 49999;

function unreachable(sandboxID: string, port: number, up: PortUpstream, e: Error): CubeError {
  const via = up.port === port ? '' : ` (through its node's port proxy at ${up.host}:${up.port})`;
  const hint =
    port === CODE_INTERPRETER_PORT
      ? ' (the code interpreter runs in sandboxes of the code-interpreter-v1 template: build it with npm run template:code-interpreter)'
      : '';
  return new CubeError('NODE_UNREACHABLE', `sandbox ${sandboxID} has nothing listening on port ${port}${via}: ${e.message}${hint}`, {
    details: { sandboxID, port },
  });
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

/** Forwards the request to `up`; `port` is the sandbox port it is for (error messages). */
/**
 * Nothing is held back either way: the answer's headers go out as soon as the sandbox sent them
 * (node:http keeps them until the first body byte otherwise, so a server that answered at once and
 * streamed its first event later, a Jupyter cell that printed nothing for a while, looked silent:
 * the SDK's request timeout ran on), and every chunk as it comes (no Nagle delay on either socket).
 * A request without a body that fails on a kept-alive connection before any answer (the server
 * closed it as it was reused) is sent once more on a new one, as browsers and Go's client do.
 */
export function proxyHttp(req: IncomingMessage, res: ServerResponse, sandboxID: string, port: number, target: PortUpstream): Promise<void> {
  const hasBody = req.headers['transfer-encoding'] !== undefined || Number(req.headers['content-length'] ?? 0) > 0;
  req.socket.setNoDelay(true);
  if (!hasBody) req.resume();
  return new Promise((resolve) => {
    let current: ClientRequest | undefined;
    res.on('close', () => current?.destroy());
    const send = (mayRetry: boolean): void => {
      const up = request(
        { host: target.host, port: target.port, method: req.method, path: target.path, headers: { ...forwardHeaders(req.headers), ...target.headers } },
        (upRes) => {
          res.writeHead(upRes.statusCode ?? 502, upRes.statusMessage, forwardHeaders(upRes.headers));
          res.flushHeaders();
          upRes.pipe(res);
          upRes.on('end', resolve);
          upRes.on('error', () => {
            res.destroy();
            resolve();
          });
        },
      );
      current = up;
      up.on('socket', (s) => s.setNoDelay(true));
      up.on('error', (e) => {
        if (mayRetry && up.reusedSocket && !res.headersSent && !res.destroyed) return send(false);
        badGateway(res, unreachable(sandboxID, port, target, e));
        resolve();
      });
      if (hasBody) req.pipe(up);
      else up.end();
    };
    send(!hasBody);
  });
}

/** Replays the upgrade request on a fresh connection to `target`, then splices the two sockets. */
export function proxyUpgrade(req: IncomingMessage, socket: Duplex, head: Buffer, sandboxID: string, port: number, target: PortUpstream): void {
  const up: Socket = connect({ host: target.host, port: target.port });
  const lines = [`${req.method} ${target.path} HTTP/1.1`];
  for (let i = 0; i < req.rawHeaders.length; i += 2) {
    const name = req.rawHeaders[i]!;
    if (ROUTING.has(name.toLowerCase())) continue;
    lines.push(`${name}: ${req.rawHeaders[i + 1]}`);
  }
  for (const [name, value] of Object.entries(target.headers)) lines.push(`${name}: ${value}`);
  let connected = false;
  up.setNoDelay(true);
  if ('setNoDelay' in socket && typeof socket.setNoDelay === 'function') (socket as Socket).setNoDelay(true);
  up.once('connect', () => {
    connected = true;
    up.write(lines.join('\r\n') + '\r\n\r\n');
    if (head.length > 0) up.write(head);
    up.pipe(socket);
    socket.pipe(up);
  });
  up.on('error', (e) => {
    if (!connected) rejectUpgrade(socket, 502, badGatewayBody(unreachable(sandboxID, port, target, e)));
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
    socket.end(
      `HTTP/1.1 ${status} ${STATUS_CODES[status] ?? ''}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(text)}\r\nconnection: close\r\n\r\n${text}`,
    );
  } else socket.destroy();
}
