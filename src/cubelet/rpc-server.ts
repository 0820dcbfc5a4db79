// Serves a NodeApi (the node's Cubelet) to control planes over HTTP/JSON: POST /node/v1/<method>
// with {args}, answering {result}; process output as NDJSON; file bodies raw. Every request
// carries the cluster secret.
import type { IncomingMessage, ServerResponse } from 'node:http';
import { readBody, readJson, sendError, sendJson } from '../api/http.js';
import { CubeError } from '../errors.js';
import { encodeProcessEvent, JSON_METHODS, RPC_PREFIX, secretMatches, type JsonMethod } from './rpc-wire.js';
import type { NodeApi, ProcessStream } from './types.js';

type Handler = (req: IncomingMessage, res: ServerResponse) => void;

const MAX_JSON = 16 << 20;
const MAX_FILE = 1 << 30;

export function nodeRpcHandler(node: NodeApi, secret: string): Handler {
  const jsonMethods = new Set<string>(JSON_METHODS);
  const call = node as unknown as Record<JsonMethod, (...a: unknown[]) => Promise<unknown>>;

  async function streamProcess(res: ServerResponse, p: Promise<ProcessStream>): Promise<void> {
    const stream = await p;
    res.writeHead(200, { 'content-type': 'application/x-ndjson' });
    // The control plane hanging up detaches from the process; it does not kill it.
    for await (const e of stream.events) {
      if (res.destroyed) break;
      res.write(JSON.stringify(encodeProcessEvent(e)) + '\n');
    }
    res.end();
  }

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
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
    if (method === 'readFile') {
      const body = await node.readFile(q('sandboxID')!, q('path')!);
      res.writeHead(200, { 'content-type': 'application/octet-stream' });
      body.pipe(res);
      return;
    }
    if (method === 'writeFile') {
      const data = await readBody(req, MAX_FILE);
      return sendJson(res, 200, { result: await node.writeFile(q('sandboxID')!, q('path')!, data, q('user')) });
    }
    const { args = [] } = await readJson<{ args?: unknown[] }>(req, MAX_JSON);
    if (method === 'sendInput') {
      const [sandboxID, pid, data] = args as [string, number, string];
      await node.sendInput(sandboxID, pid, Buffer.from(data, 'base64'));
      return sendJson(res, 200, { result: null });
    }
    if (method === 'startProcess') return streamProcess(res, node.startProcess(...(args as Parameters<NodeApi['startProcess']>)));
    if (method === 'connectProcess') return streamProcess(res, node.connectProcess(...(args as Parameters<NodeApi['connectProcess']>)));
    if (!jsonMethods.has(method)) throw new CubeError('NOT_FOUND', `no node method ${method}`);
    const result = await call[method as JsonMethod](...args);
    sendJson(res, 200, { result: result ?? null });
  }

  return (req, res) => {
    handle(req, res).catch((e: unknown) => sendError(res, e, 'admin'));
  };
}

