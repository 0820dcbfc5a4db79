// Serves a NodeApi (the node's Cubelet) to control planes over HTTP/JSON: POST /node/v1/<method>
// with {args}, answering {result}; process output as NDJSON; file bodies raw; and the port
// proxy (/node/v1/proxy/<sandboxID>/<port>/..., any method and upgrades) to the sandboxes'
// addresses, which only this node reaches. Every request carries the cluster secret.
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { readBody, readJson, sendError, sendJson, writeWaiting, type ErrorLog } from '../http.js';
import { proxyHttp, proxyUpgrade, rejectUpgrade } from './port-proxy.js';
import { CubeError, errorBody, toCubeError } from '../errors.js';
import type { LayerServer } from '../templates/fetch.js';
import { underFence, type FenceBook } from './fences.js';
import type { TemplateBuilder } from '../templates/build/build.js';
import {
  checkDeadline,
  DEADLINE_HEADER,
  encodeProcessEvent,
  FENCE_HEADER,
  JSON_METHODS,
  nodeArgs,
  parseProxyPath,
  PROXY_SECRET_HEADER,
  RPC_PREFIX,
  secretMatches,
  type ImportRequest,
  type JsonMethod,
} from './rpc-wire.js';
import type { NodeApi, PortUpstream, ProcessStream } from './types.js';
import { sameTemplate } from '../model/template.js';
import { isVolumeMethod, serveVolumeCall } from './rpc-volumes.js';

type Handler = (req: IncomingMessage, res: ServerResponse) => void;

const MAX_JSON = 16 << 20;
const MAX_FILE = 1 << 30;

/**
 * `fences`: the node's FenceBook (the highest lock fence accepted per sandbox, kept across restarts).
 * `layers`: the node's templates and layers, served to the nodes fetching them through the control plane (templates/fetch.ts).
 * `builds`: the node's template builder, which control replicas hand builds to (templates/cluster.ts).
 */
export function nodeRpcHandler(node: NodeApi, secret: string, fences: FenceBook, log?: ErrorLog, layers?: LayerServer, builds?: TemplateBuilder): Handler {
  const jsonMethods = new Set<string>(JSON_METHODS);
  const call = node as unknown as Record<JsonMethod, (...a: unknown[]) => Promise<unknown>>;

  async function streamProcess(res: ServerResponse, p: Promise<ProcessStream>): Promise<void> {
    const stream = await p;
    res.writeHead(200, { 'content-type': 'application/x-ndjson' });
    // The control plane hanging up detaches from the process; it does not kill it. A slow reader
    // is waited for (the events queue behind, bounded per subscriber: process-table.ts), never
    // buffered in the response without bound.
    for await (const e of stream.events) {
      if (res.destroyed) break;
      await writeWaiting(res, JSON.stringify(encodeProcessEvent(e)) + '\n');
    }
    res.end();
  }

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const proxied = await portTarget(node, secret, req);
    if (proxied) return proxyHttp(req, res, proxied.sandboxID, proxied.up.port, proxied.up);
    if (!secretMatches(req.headers.authorization, secret)) throw new CubeError('UNAUTHORIZED', 'node RPC needs the cluster secret (CUBE_CLUSTER_SECRET)');
    const url = new URL(req.url ?? '/', 'http://node');
    if (!url.pathname.startsWith(RPC_PREFIX)) throw new CubeError('NOT_FOUND', `no route ${url.pathname}`);
    const method = url.pathname.slice(RPC_PREFIX.length);
    const q = (k: string) => url.searchParams.get(k) ?? undefined;
    if (method === 'events') {
      res.writeHead(200, { 'content-type': 'application/x-ndjson' });
      const off = node.subscribe((e) => res.write(JSON.stringify(e) + '\n'));
      res.on('close', off);
      return;
    }
    if (layers && method === 'layer') {
      const tar = layers.packedLayer(q('digest') ?? '');
      res.writeHead(200, { 'content-type': 'application/x-tar' });
      // An error mid-layer cuts the answer short: the fetching node's check fails on it.
      await pipeline(tar, res).catch((err: unknown) => {
        log?.error({ err, digest: q('digest') }, 'serving a layer failed');
        res.destroy();
      });
      return;
    }
    if (builds && method === 'buildFiles') {
      await builds.putFiles(q('hash') ?? '', req, q('owner'));
      return sendJson(res, 201, { result: null });
    }
    if (layers && method === 'importImage')
      return sendJson(res, 201, { result: await layers.importUpload(req, JSON.parse(q('import') ?? '{}') as ImportRequest) });
    if (method === 'readFile') {
      const body = await node.readFile(q('sandboxID')!, q('path')!, q('user'));
      res.writeHead(200, { 'content-type': 'application/octet-stream' });
      body.pipe(res);
      return;
    }
    if (method === 'writeFile') {
      const data = await readBody(req, MAX_FILE);
      return sendJson(res, 200, { result: await node.writeFile(q('sandboxID')!, q('path')!, data, q('user')) });
    }
    if (isVolumeMethod(method)) return serveVolumeCall(node.volumes, method, req, res, url.searchParams);
    const { args = [] } = await readJson<{ args?: unknown[] }>(req, MAX_JSON);
    if (method === 'sendInput') {
      const [sandboxID, pid, data] = args as [string, number, string];
      await node.sendInput(sandboxID, pid, Buffer.from(data, 'base64'));
      return sendJson(res, 200, { result: null });
    }
    if (layers && method === 'templateRecord') return sendJson(res, 200, { result: await layers.heldTemplate(String(args[0])) });
    if (layers && method === 'fetchProgress') return sendJson(res, 200, { result: layers.fetchProgress() });
    if (layers && method === 'tagTemplate')
      return sendJson(res, 200, { result: await layers.tagTemplate(String(args[0]), (args[1] as unknown[]).map(String)) });
    if (layers && method === 'templateRecords') return sendJson(res, 200, { result: await layers.listRecords() });
    if (layers && method === 'removeTemplate') {
      // The replica checked the cluster's sandboxes; the node checks its own again (a create may have come since).
      const inUse = async (ref: string) =>
        (await node.listSandboxes()).filter((s) => s.state !== 'gone' && sameTemplate(s.templateID, ref)).map((s) => s.sandboxID);
      return sendJson(res, 200, { result: await layers.removeTemplate(String(args[0]), (rec) => inUse(rec.ref)) });
    }
    if (builds && method.startsWith('build')) {
      const [a, b, c] = args as [never, never, never];
      // The key whose uploads a build takes (buildStart's 4th argument, buildHasFiles' 2nd): JSON's null is none.
      const owner = (i: number) => (typeof args[i] === 'string' ? args[i] : undefined);
      if (method === 'buildRequest') return sendJson(res, 200, { result: builds.request(a) });
      if (method === 'buildStart') return sendJson(res, 200, { result: await builds.start(a, b, c, owner(3)) });
      if (method === 'buildGet') return sendJson(res, 200, { result: builds.get(a, b) });
      if (method === 'buildList') return sendJson(res, 200, { result: builds.list(a) });
      if (method === 'buildHasFiles') return sendJson(res, 200, { result: builds.hasFiles(a, owner(1)) });
    }
    if (method === 'startProcess') return streamProcess(res, node.startProcess(...(args as Parameters<NodeApi['startProcess']>)));
    if (method === 'watchDir') {
      const changes = await node.watchDir(...(args as Parameters<NodeApi['watchDir']>));
      res.writeHead(200, { 'content-type': 'application/x-ndjson' });
      res.write('{"ready":true}\n');
      // The control plane hanging up ends the watch at once, however quiet the directory.
      const it = changes[Symbol.asyncIterator]();
      res.on('close', () => void it.return?.());
      for (let r = await it.next(); !r.done && !res.destroyed; r = await it.next()) res.write(JSON.stringify(r.value) + '\n');
      res.end();
      return;
    }
    if (method === 'connectProcess') return streamProcess(res, node.connectProcess(...(args as Parameters<NodeApi['connectProcess']>)));
    if (!jsonMethods.has(method)) throw new CubeError('NOT_FOUND', `no node method ${method}`);
    checkDeadline(method, req.headers[DEADLINE_HEADER]);
    const fence = req.headers[FENCE_HEADER];
    const result = await underFence(fences, method, args[0], Array.isArray(fence) ? fence[0] : fence, () =>
      call[method as JsonMethod](...nodeArgs(method, args)),
    );
    // `at`: this node's clock once the call is done; the control plane orders the node's later
    // heartbeat lists against it (rpc-wire.ts Heartbeat.at).
    sendJson(res, 200, { result: result ?? null, at: Date.now() });
  }

  return (req, res) => {
    handle(req, res).catch((e: unknown) => sendError(res, e, 'admin', log));
  };
}

/** A port-proxy request: its sandbox and where to forward (the sandbox's address); undefined for other node RPC. */
async function portTarget(node: NodeApi, secret: string, req: IncomingMessage): Promise<{ sandboxID: string; up: PortUpstream } | undefined> {
  const t = parseProxyPath(req.url ?? '/');
  if (!t) return undefined;
  const got = req.headers[PROXY_SECRET_HEADER];
  if (!secretMatches(Array.isArray(got) ? got[0] : got, secret))
    throw new CubeError('UNAUTHORIZED', `the port proxy needs the cluster secret in ${PROXY_SECRET_HEADER}`);
  return { sandboxID: t.sandboxID, up: { host: await node.sandboxAddress(t.sandboxID), port: t.port, path: t.path, headers: {} } };
}

/** Upgrades (WebSocket and the like) through the node's port proxy; anything else is refused. */
export function nodeUpgradeHandler(node: NodeApi, secret: string): (req: IncomingMessage, socket: Duplex, head: Buffer) => void {
  return (req, socket, head) => {
    portTarget(node, secret, req)
      .then((t) => {
        if (!t) throw new CubeError('NOT_FOUND', `no upgrade route ${(req.url ?? '/').split('?', 1)[0]}`);
        proxyUpgrade(req, socket, head, t.sandboxID, t.up.port, t.up);
      })
      .catch((e: unknown) => {
        const err = toCubeError(e);
        rejectUpgrade(socket, err.http, errorBody(err, 'admin'));
      });
  };
}
