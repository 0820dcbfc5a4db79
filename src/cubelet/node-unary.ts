// The node API's unary calls (most of them: a create, a destroy) on plain node:http, both sides:
// the Connect protocol's unary form (POST /<service>/<Method>, a binary protobuf body, an error as
// Connect's JSON with the cube code in the headers), encoded and decoded by the generated
// descriptors, so any unary method of the schema goes through here with no code of its own.
// connect-node's adapter and client (which serve the streams, and any Connect client) cost the
// create path of `bench/cluster-sim.ts` about 0.9 ms of the node's CPU and 0.4-0.7 ms of the
// control's per create (abort signals, header objects, async iterables per request:
// docs/benchmarks.md, "Node API from a schema"), as fetch did against node:http before.
import { request as httpRequest, type Agent, type IncomingMessage, type ServerResponse } from 'node:http';
import { request as httpsRequest } from 'node:https';
import {
  create,
  fromBinary,
  toBinary,
  type DescMessage,
  type DescMethod,
  type DescService,
  type MessageInitShape,
  type MessageShape,
} from '@bufbuild/protobuf';
import { Code, ConnectError, createHandlerContext, type HandlerContext } from '@connectrpc/connect';
import { codeFromHttpStatus, codeToHttpStatus, errorFromJsonBytes, errorToJsonBytes } from '@connectrpc/connect/protocol-connect';
import { readBody } from '../http.js';
import { nodeErrorOut } from './node-wire.js';

/** A unary method of the schema: what its descriptor says of its input and output. */
export type Unary<I extends DescMessage, O extends DescMessage> = DescMethod & { methodKind: 'unary'; input: I; output: O };

export interface UnaryRoute {
  service: DescService;
  method: DescMethod;
  call: (input: MessageShape<DescMessage>, ctx: HandlerContext) => Promise<unknown>;
}

/** The unary methods of `service` that `impl` serves, by request path: the table the server looks up. */
export function unaryRoutes(service: DescService, impl: Readonly<Record<string, unknown>>): Map<string, UnaryRoute> {
  const routes = new Map<string, UnaryRoute>();
  for (const method of service.methods) {
    const fn = impl[method.localName];
    if (method.methodKind !== 'unary' || typeof fn !== 'function') continue;
    // The ServiceImpl type checked each handler against its method's messages where it was written.
    const handler = fn as (input: unknown, ctx: HandlerContext) => unknown;
    routes.set(`/${service.typeName}/${method.name}`, { service, method, call: async (input, ctx) => handler(input, ctx) });
  }
  return routes;
}

/**
 * Serves one unary call: `check` sees the request first (the secret, the deadline), `header`
 * names the request headers the handlers read (the fence), `done` adds headers to the answer.
 */
export async function serveUnary(
  route: UnaryRoute,
  req: IncomingMessage,
  res: ServerResponse,
  o: {
    maxBytes: number;
    check: (req: IncomingMessage, method: string) => void;
    header: readonly string[];
    answerHeaders: () => Record<string, string>;
    failed: (e: unknown) => void;
  },
): Promise<void> {
  try {
    o.check(req, route.method.localName);
    const body = await readBody(req, o.maxBytes);
    let input: MessageShape<DescMessage>;
    try {
      input = fromBinary(route.method.input, body);
    } catch (e) {
      throw new ConnectError(`parse binary: ${(e as Error).message}`, Code.InvalidArgument);
    }
    const requestHeader: Record<string, string> = {};
    for (const h of o.header) {
      const v = req.headers[h];
      if (typeof v === 'string') requestHeader[h] = v;
    }
    const ctx = createHandlerContext({
      service: route.service,
      method: route.method,
      protocolName: 'connect',
      requestMethod: 'POST',
      url: req.url ?? '',
      requestHeader,
    });
    const out = await route.call(input, ctx);
    const bytes = toBinary(route.method.output, create(route.method.output, out as MessageInitShape<DescMessage>));
    res.writeHead(200, { 'content-type': 'application/proto', 'content-length': bytes.byteLength, ...o.answerHeaders() });
    res.end(bytes);
  } catch (e) {
    o.failed(e);
    const err = nodeErrorOut(e);
    const json = errorToJsonBytes(err, {});
    const headers: Record<string, string | number> = { 'content-type': 'application/json', 'content-length': json.byteLength };
    err.metadata.forEach((v, k) => (headers[k] = v));
    if (res.headersSent) res.destroy(err);
    else res.writeHead(codeToHttpStatus(err.code), headers).end(json);
  }
}

/**
 * One unary call from the control plane: the input encoded by its descriptor, POSTed on `agent`
 * (http: addresses), the answer decoded, or the node's error as a ConnectError (its metadata
 * carries the cube code). `bound`: a timeout in ms, or a signal that ends the call.
 */
export function postUnary<I extends DescMessage, O extends DescMessage>(
  address: string,
  method: Unary<I, O>,
  init: MessageInitShape<I>,
  headers: Record<string, string>,
  bound: number | AbortSignal | undefined,
  agent: Agent | undefined,
  onAnswer?: (res: IncomingMessage) => void,
): Promise<MessageShape<O>> {
  const url = new URL(`${address.replace(/\/+$/, '')}/${method.parent.typeName}/${method.name}`);
  const body = toBinary(method.input, create(method.input, init));
  return post(url, body, { ...headers, 'content-type': 'application/proto', 'connect-protocol-version': '1' }, bound, agent, true).then(({ res, bytes }) => {
    if (res.statusCode === 200) {
      onAnswer?.(res);
      return fromBinary(method.output, bytes);
    }
    const metadata = new Headers();
    for (const [k, v] of Object.entries(res.headers)) if (typeof v === 'string') metadata.set(k, v);
    const status = res.statusCode ?? 0;
    throw errorFromJsonBytes(bytes, metadata, new ConnectError(`HTTP ${status}`, codeFromHttpStatus(status), metadata));
  });
}

function post(
  url: URL,
  body: Uint8Array,
  headers: Record<string, string>,
  bound: number | AbortSignal | undefined,
  agent: Agent | undefined,
  retry: boolean,
): Promise<{ res: IncomingMessage; bytes: Buffer }> {
  return new Promise((resolve, reject) => {
    const send = url.protocol === 'https:' ? httpsRequest : httpRequest;
    const req = send(url, { method: 'POST', ...(agent ? { agent } : {}), headers: { ...headers, 'content-length': body.byteLength } }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => {
        clearTimeout(timer);
        resolve({ res, bytes: chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks) });
      });
      res.on('error', fail);
    });
    const abort = (): void => void req.destroy(typeof bound === 'number' ? new Error(`no answer within ${bound} ms`) : (bound?.reason as Error));
    const timer = typeof bound === 'number' ? setTimeout(abort, bound) : undefined;
    if (typeof bound === 'object') {
      if (bound.aborted) abort();
      else bound.addEventListener('abort', abort, { once: true });
    }
    function fail(e: Error): void {
      clearTimeout(timer);
      // A kept-alive socket the node closed as this request went out: the node never read it.
      if (retry && req.reusedSocket && (e as NodeJS.ErrnoException).code === 'ECONNRESET') resolve(post(url, body, headers, bound, agent, false));
      else reject(e);
    }
    req.on('error', fail);
    req.end(body);
  });
}
