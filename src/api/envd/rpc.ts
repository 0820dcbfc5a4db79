// Serves Connect RPC calls over node:http: unary calls as plain JSON, server streams as
// envelopes ending in the end-of-stream frame, with keepalives and Connect-Timeout-Ms.
import type { IncomingMessage, ServerResponse } from 'node:http';
import { readBody } from '../http.js';
import {
  CONTENT_TYPE_STREAM,
  CONTENT_TYPE_UNARY,
  ConnectError,
  decodeStreamRequest,
  encodeEndStream,
  encodeMessage,
  errorJson,
  httpStatusOf,
  keepaliveIntervalMs,
  parseJsonMessage,
  parseTimeoutMs,
  toConnectError,
} from './connect.js';

/** What a method may use of the call: the deadline and a signal that fires when the client goes away or the deadline passes. */
export interface CallInfo {
  req: IncomingMessage;
  /** Connect-Timeout-Ms, if the client set one. */
  timeoutMs?: number;
  signal: AbortSignal;
}

export interface StreamSink {
  send(msg: unknown): Promise<void>;
}

export type UnaryMethod<C> = (call: C & CallInfo, msg: unknown) => Promise<unknown>;
export type StreamMethod<C> = (call: C & CallInfo, msg: unknown, out: StreamSink) => Promise<void>;

export interface Service<C> {
  unary: Record<string, UnaryMethod<C>>;
  stream: Record<string, { keepalive: unknown; run: StreamMethod<C> }>;
}

/** Streams get this much past their deadline so a process killed at the deadline can still report its end. */
const DEADLINE_GRACE_MS = 1000;
/** Request messages are small (a command line, a path); file bodies go through /files. */
const MAX_REQUEST_BYTES = 4 << 20;

const mediaType = (req: IncomingMessage): string => (req.headers['content-type'] ?? '').split(';')[0]!.trim().toLowerCase();

function sendUnaryError(res: ServerResponse, err: ConnectError): void {
  const text = JSON.stringify(errorJson(err));
  res.writeHead(httpStatusOf(err.code), { 'content-type': CONTENT_TYPE_UNARY, 'content-length': Buffer.byteLength(text) });
  res.end(text);
}

/** Handles `POST /<service>/<Method>`; returns false when the path names no method of `services`. */
export async function serveConnect<C>(req: IncomingMessage, res: ServerResponse, services: Record<string, Service<C>>, call: C): Promise<boolean> {
  const m = /^\/([\w.]+)\/(\w+)$/.exec((req.url ?? '').split('?')[0]!);
  const svc = m ? services[m[1]!] : undefined;
  if (!m || !svc) return false;
  const method = m[2]!;
  const stream = svc.stream[method];
  const unary = svc.unary[method];
  if (!stream && !unary) {
    sendUnaryError(res, new ConnectError('unimplemented', `${m[1]}/${method} is not implemented`));
    return true;
  }
  if (req.method !== 'POST') {
    res.writeHead(405, { allow: 'POST' }).end();
    return true;
  }
  const abort = new AbortController();
  res.on('close', () => abort.abort(new ConnectError('canceled', 'client went away')));
  try {
    const timeoutMs = parseTimeoutMs(req.headers['connect-timeout-ms']);
    const info: CallInfo = { req, signal: abort.signal, ...(timeoutMs !== undefined ? { timeoutMs } : {}) };
    const body = await readBody(req, MAX_REQUEST_BYTES);
    if (stream) {
      if (mediaType(req) !== CONTENT_TYPE_STREAM) throw new ConnectError('invalid_argument', `${method} is a server stream: send ${CONTENT_TYPE_STREAM}`);
      await runStream(res, stream, { ...call, ...info }, decodeStreamRequest(body), abort, req.headers['keepalive-ping-interval']);
    } else {
      if (mediaType(req) !== CONTENT_TYPE_UNARY) throw new ConnectError('invalid_argument', `${method} is unary: send ${CONTENT_TYPE_UNARY}`);
      const out = await unary!({ ...call, ...info }, parseJsonMessage(body));
      const text = JSON.stringify(out ?? {});
      res.writeHead(200, { 'content-type': CONTENT_TYPE_UNARY, 'content-length': Buffer.byteLength(text) });
      res.end(text);
    }
  } catch (e) {
    if (!res.headersSent) sendUnaryError(res, toConnectError(e));
    else if (!res.writableEnded) res.end(encodeEndStream(toConnectError(e)));
  }
  return true;
}

async function runStream<C>(res: ServerResponse, method: Service<C>['stream'][string], call: C & CallInfo, msg: unknown, abort: AbortController, keepaliveHeader: string | string[] | undefined): Promise<void> {
  res.writeHead(200, { 'content-type': CONTENT_TYPE_STREAM });
  res.flushHeaders();
  const keepaliveMs = keepaliveIntervalMs(keepaliveHeader);
  let keepalive: NodeJS.Timeout | undefined;
  const write = async (frame: Buffer): Promise<void> => {
    if (res.writableEnded || res.destroyed) return;
    if (!res.write(frame)) await new Promise<void>((resolve) => {
      const done = (): void => {
        res.off('drain', done);
        res.off('close', done);
        resolve();
      };
      res.on('drain', done);
      res.on('close', done);
    });
  };
  let finished = false;
  const armKeepalive = (): void => {
    clearTimeout(keepalive);
    if (finished) return;
    keepalive = setTimeout(() => void write(encodeMessage(method.keepalive)).then(armKeepalive), keepaliveMs);
  };
  const deadline = call.timeoutMs === undefined ? undefined : setTimeout(() => abort.abort(new ConnectError('deadline_exceeded', `deadline of ${call.timeoutMs} ms (Connect-Timeout-Ms) exceeded`)), call.timeoutMs + DEADLINE_GRACE_MS);
  armKeepalive();
  let failure: ConnectError | undefined;
  try {
    await method.run(call, msg, {
      send: async (m) => {
        armKeepalive();
        await write(encodeMessage(m));
      },
    });
    if (abort.signal.aborted) failure = toConnectError(abort.signal.reason);
  } catch (e) {
    failure = toConnectError(abort.signal.aborted ? abort.signal.reason : e);
  } finally {
    finished = true;
    clearTimeout(keepalive);
    clearTimeout(deadline);
  }
  if (!res.writableEnded && !res.destroyed) res.end(encodeEndStream(failure));
}

/**
 * Iterates `events` until they end or `signal` fires. Stopping early only detaches
 * (return() on the iterator): the producer decides what that means, and NodeApi
 * streams keep their process running.
 */
export async function* untilAborted<T>(events: AsyncIterable<T>, signal: AbortSignal): AsyncGenerator<T> {
  const it = events[Symbol.asyncIterator]();
  const aborted = new Promise<'aborted'>((resolve) => {
    if (signal.aborted) resolve('aborted');
    else signal.addEventListener('abort', () => resolve('aborted'), { once: true });
  });
  try {
    for (;;) {
      const r = await Promise.race([it.next(), aborted]);
      if (r === 'aborted' || r.done) return;
      yield r.value;
    }
  } finally {
    void it.return?.()?.catch(() => undefined);
  }
}
