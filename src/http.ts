// Small helpers shared by every HTTP server of the daemon (the API's route families: E2B REST, envd,
// admin; the node RPC server): JSON in and out, body limits, errors as {code, message} with the status
// from the error table.
import type { IncomingMessage, ServerResponse } from 'node:http';
import { CubeError, errorBody, errorKindOf, toCubeError } from './errors.js';

export type Flavour = 'e2b' | 'admin';

export function sendJson(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text), ...headers });
  res.end(text);
}

/**
 * An answer's delivery (model/sandbox.ts AnswerHook): `sent()` is called right after the answer's
 * `res.end`, which writes to the socket in that call (Node uncorks at the end), so work hooked
 * here follows the write by microseconds, not by the event-loop turns a 'finish' event takes.
 */
export class Delivery {
  /** Aborted when the client's connection closes before the answer was sent (it gave up: a timeout, a killed process). */
  readonly signal: AbortSignal;
  private hooks?: { sent: () => void; lost: () => void };
  constructor(res: ServerResponse) {
    const ac = new AbortController();
    this.signal = ac.signal;
    res.once('close', () => {
      const h = this.hooks;
      this.hooks = undefined;
      if (res.writableFinished) return;
      ac.abort(new Error('the client closed its connection before the answer'));
      h?.lost();
    });
  }

  whenSent(sent: () => void, lost: () => void): void {
    this.hooks = { sent, lost };
  }

  sent(): void {
    const h = this.hooks;
    this.hooks = undefined;
    h?.sent();
  }
}

export function sendNoContent(res: ServerResponse, status = 204): void {
  // A 202 or 201 without a body says so (content-length 0): the e2b SDK's client parses a body otherwise.
  res.writeHead(status, status === 204 ? {} : { 'content-length': 0 });
  res.end();
}

/** Where 5xx causes go (a pino logger in the daemon). */
export interface ErrorLog {
  error(obj: object, msg: string): void;
}

/** Answers with the error's status and body; a 5xx is a bug, so with `log` its cause is logged. */
export function sendError(res: ServerResponse, e: unknown, flavour: Flavour, log?: ErrorLog): void {
  const err = toCubeError(e);
  if (log && err.http >= 500) log.error({ err: e, code: err.code }, 'request failed');
  if (res.headersSent) {
    res.destroy(err);
    return;
  }
  const headers: Record<string, string> = {};
  if (err.retryAfter !== undefined) headers['retry-after'] = String(err.retryAfter);
  sendJson(res, err.http, errorBody(err, flavour), headers);
}

/** What is read and dropped of a body past its limit while the 400 goes out (then the connection is cut). */
const OVERFLOW_DRAIN_BYTES = 16 * 1024 ** 2;

/**
 * Writes `chunk` to a streamed answer and waits while the client is slower than what is written
 * (or until it leaves): what a slow reader has not taken stays bounded, never piles up in `res`.
 */
export function writeWaiting(res: ServerResponse, chunk: string | Buffer): Promise<void> | undefined {
  if (res.write(chunk) || res.destroyed) return undefined;
  return new Promise((resolve) => {
    const done = (): void => {
      res.off('drain', done).off('close', done);
      resolve();
    };
    res.on('drain', done).on('close', done);
  });
}

/**
 * The whole body. Read from the stream's events, not with for await: the async iterator cost
 * 15-25 us more per request on this machine (3.1% of the control's CPU went to reading the creates'
 * bodies of ~60 bytes in the 1000-node bench). A body over `maxBytes` is refused (400); the rest
 * of it is read and dropped so the answer reaches the client (cutting the connection at once lost
 * it: the client saw a reset and no answer), up to OVERFLOW_DRAIN_BYTES more, then cut.
 */
export function readBody(req: IncomingMessage, maxBytes = 1 << 20): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const settle = (err?: Error): void => {
      req.off('data', onData).off('end', onEnd).off('error', settle).off('close', onClose);
      if (err) reject(err);
      else resolve(chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, size));
    };
    const onData = (chunk: Buffer): void => {
      size += chunk.length;
      if (size <= maxBytes) return void chunks.push(chunk);
      settle(new CubeError('BAD_REQUEST', `request body larger than ${maxBytes} bytes`));
      let dropped = 0;
      req.on('data', (c: Buffer) => {
        dropped += c.length;
        if (dropped > OVERFLOW_DRAIN_BYTES) req.destroy();
      });
    };
    const onEnd = (): void => settle();
    const onClose = (): void => settle(Object.assign(new Error('the request closed before its body ended'), { code: 'ERR_STREAM_PREMATURE_CLOSE' }));
    // Read by someone else already: nothing left (as the loop found).
    if (req.readableEnded) return settle();
    if (req.destroyed) return onClose();
    req.on('data', onData).on('end', onEnd).on('error', settle).on('close', onClose);
  });
}

/** Parses a JSON body; an empty body is `{}`. */
export async function readJson<T = Record<string, unknown>>(req: IncomingMessage, maxBytes?: number): Promise<T> {
  const buf = await readBody(req, maxBytes);
  if (buf.length === 0) return {} as T;
  try {
    return JSON.parse(buf.toString('utf8')) as T;
  } catch (e) {
    throw new CubeError('BAD_REQUEST', `request body is not valid JSON: ${(e as Error).message}`);
  }
}

/** The CubeError an error answer of a cubed process (node RPC, cluster routes) carries, by its code: the way back of errorBody. */
export async function answerError(res: Response, who: string): Promise<CubeError> {
  return errorOf(res.status, await res.text().catch(() => ''), who);
}

export function errorOf(status: number, text: string, who: string): CubeError {
  let body: { code?: number; message?: string; details?: Record<string, unknown> } = {};
  try {
    body = JSON.parse(text) as typeof body;
  } catch {
    // not JSON: the status says it
  }
  const kind = (body.code !== undefined && errorKindOf(body.code)) || 'INTERNAL';
  return new CubeError(kind, (body.message ?? `${who} answered ${status}`).replace(/^\d{6} /, ''), body.details ? { details: body.details } : {});
}
