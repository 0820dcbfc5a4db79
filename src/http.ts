// Small helpers shared by every HTTP server of the daemon (the API's route families: E2B REST, envd,
// admin; the node RPC server): JSON in and out, body limits, errors as {code, message} with the status
// from the error table.
import type { IncomingMessage, ServerResponse } from 'node:http';
import { CubeError, errorBody, toCubeError } from './errors.js';

export type Flavour = 'e2b' | 'admin';

export function sendJson(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text), ...headers });
  res.end(text);
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

export async function readBody(req: IncomingMessage, maxBytes = 1 << 20): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    if (size > maxBytes) throw new CubeError('BAD_REQUEST', `request body larger than ${maxBytes} bytes`);
    chunks.push(chunk as Buffer);
  }
  return Buffer.concat(chunks);
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
