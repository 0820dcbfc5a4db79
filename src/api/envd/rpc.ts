// Serves envd's Connect services through @connectrpc/connect-node: the Connect protocol with
// the JSON and binary protobuf codecs, gzip and brotli (older Python SDKs send binary + gzip),
// plus gRPC and gRPC-web. What cubed adds: the sandbox a call is for (a context value),
// CubeErrors as Connect codes, and envd's keepalive messages on idle server streams.
import type { IncomingMessage, ServerResponse } from 'node:http';
import { createContextValues, type ConnectRouter, type ContextKey, type HandlerContext, type Interceptor } from '@connectrpc/connect';
import { connectNodeAdapter } from '@connectrpc/connect-node';
import { Code, ConnectError, keepaliveIntervalMs, toConnectError } from './connect.js';

/** Request messages are small (a command line, a path); file bodies go through /files. */
const MAX_REQUEST_BYTES = 4 << 20;

async function* asConnectErrorsInStream<T>(messages: AsyncIterable<T>): AsyncIterable<T> {
  try {
    yield* messages;
  } catch (e) {
    throw toConnectError(e);
  }
}

/** Handlers throw CubeErrors (from NodeApi) too: each becomes its Connect code, before or during a stream. */
const asConnectErrors: Interceptor = (next) => async (req) => {
  try {
    const res = await next(req);
    return res.stream ? { ...res, message: asConnectErrorsInStream(res.message) } : res;
  } catch (e) {
    throw toConnectError(e);
  }
};

/**
 * A node:http handler for the routes; `serve(req, res, call)` answers one request, and
 * handlers read `call` back with `callOf(ctx)`.
 */
export function connectServer<C>(
  key: ContextKey<C | undefined>,
  routes: (router: ConnectRouter) => void,
): (req: IncomingMessage, res: ServerResponse, call: C) => void {
  const calls = new WeakMap<object, C>();
  const adapter = connectNodeAdapter({
    routes,
    contextValues: (req) => createContextValues().set(key, calls.get(req)),
    interceptors: [asConnectErrors],
    readMaxBytes: MAX_REQUEST_BYTES,
  });
  return (req, res, call) => {
    calls.set(req, call);
    adapter(req, res);
  };
}

export function callOf<C>(ctx: HandlerContext, key: ContextKey<C | undefined>): C {
  const call = ctx.values.get(key);
  if (call === undefined) throw new ConnectError('no sandbox bound to this call', Code.Internal);
  return call;
}

/** The call's Connect-Timeout-Ms passed: what its signal says when it aborted for that. */
function deadlineOf(ctx: HandlerContext): ConnectError | undefined {
  const reason: unknown = ctx.signal.reason;
  return reason instanceof ConnectError && reason.code === Code.DeadlineExceeded ? reason : undefined;
}

/**
 * `events` until they end or the call ends (client gone, deadline), with `keepalive` sent
 * whenever nothing else was for Keepalive-Ping-Interval, as envd does. Stopping early only
 * detaches (return() on the iterator): the producer decides what that means, and NodeApi
 * streams keep their process running. A call whose deadline (Connect-Timeout-Ms) passed ends
 * with `deadline_exceeded`, as envd's does: the SDKs raise their timeout error on it (a stream
 * that merely stopped was "Command ended without an end event" to the Python SDK).
 */
export async function* withKeepalives<T, K>(events: AsyncIterable<T>, keepalive: K, ctx: HandlerContext): AsyncGenerator<T | K> {
  const everyMs = keepaliveIntervalMs(ctx.requestHeader.get('keepalive-ping-interval'));
  const it = events[Symbol.asyncIterator]();
  const aborted = new Promise<'aborted'>((resolve) => {
    if (ctx.signal.aborted) resolve('aborted');
    else ctx.signal.addEventListener('abort', () => resolve('aborted'), { once: true });
  });
  let next = it.next();
  try {
    for (;;) {
      let timer: NodeJS.Timeout | undefined;
      const idle = new Promise<'idle'>((resolve) => (timer = setTimeout(() => resolve('idle'), everyMs)));
      const r = await Promise.race([next, idle, aborted]).finally(() => clearTimeout(timer));
      if (r === 'aborted') {
        const deadline = deadlineOf(ctx);
        if (deadline) throw deadline;
        return;
      }
      if (r === 'idle') {
        yield keepalive;
        continue;
      }
      if (r.done) return;
      next = it.next();
      yield r.value;
    }
  } finally {
    // Closing the source is best effort: the client is gone, nothing is left to tell.
    void it.return?.().catch(() => undefined);
  }
}
