// The Connect protocol (v1, JSON codec) as the e2b SDK speaks it: 5-byte envelopes for
// server streams, the end-of-stream frame, error codes and their HTTP statuses.
// Pure: no sockets here, so every rule is unit-tested with tables.
import { CubeError, type ErrorKind } from '../../errors.js';

export const FLAG_MESSAGE = 0x00;
export const FLAG_COMPRESSED = 0x01;
export const FLAG_END_STREAM = 0x02;

export const CONTENT_TYPE_UNARY = 'application/json';
export const CONTENT_TYPE_STREAM = 'application/connect+json';

export type ConnectCode =
  | 'canceled'
  | 'unknown'
  | 'invalid_argument'
  | 'deadline_exceeded'
  | 'not_found'
  | 'already_exists'
  | 'permission_denied'
  | 'resource_exhausted'
  | 'failed_precondition'
  | 'aborted'
  | 'out_of_range'
  | 'unimplemented'
  | 'internal'
  | 'unavailable'
  | 'data_loss'
  | 'unauthenticated';

/** HTTP status of a unary error, as the Connect spec maps codes. */
const HTTP_STATUS: Record<ConnectCode, number> = {
  canceled: 499,
  unknown: 500,
  invalid_argument: 400,
  deadline_exceeded: 504,
  not_found: 404,
  already_exists: 409,
  permission_denied: 403,
  resource_exhausted: 429,
  failed_precondition: 400,
  aborted: 409,
  out_of_range: 400,
  unimplemented: 501,
  internal: 500,
  unavailable: 503,
  data_loss: 500,
  unauthenticated: 401,
};

export function httpStatusOf(code: ConnectCode): number {
  return HTTP_STATUS[code];
}

/** An error a Connect handler answers with; carries its code so the SDK maps it to the right exception. */
export class ConnectError extends Error {
  constructor(
    readonly code: ConnectCode,
    message: string,
  ) {
    super(message);
    this.name = 'ConnectError';
  }
}

const CODE_OF_KIND: Partial<Record<ErrorKind, ConnectCode>> = {
  BAD_REQUEST: 'invalid_argument',
  UNAUTHORIZED: 'unauthenticated',
  NOT_FOUND: 'not_found',
  CONFLICT: 'failed_precondition',
  RATE_LIMITED: 'resource_exhausted',
  CONCURRENCY_LIMITED: 'resource_exhausted',
  SANDBOX_BUSY: 'unavailable',
  STATE_UNAVAILABLE: 'unavailable',
  NODE_UNREACHABLE: 'unavailable',
  NO_NODE: 'unavailable',
  CONFIG_INVALID: 'invalid_argument',
};

/** Any thrown value as a Connect error; CubeErrors keep their 1305xx code in the message. */
export function toConnectError(e: unknown): ConnectError {
  if (e instanceof ConnectError) return e;
  if (e instanceof CubeError) return new ConnectError(CODE_OF_KIND[e.kind] ?? 'internal', `${e.code} ${e.message}`);
  return new ConnectError('internal', e instanceof Error ? e.message : String(e));
}

export function errorJson(err: ConnectError): { code: ConnectCode; message: string } {
  return { code: err.code, message: err.message };
}

export function encodeEnvelope(flags: number, msg: unknown): Buffer {
  const data = Buffer.from(JSON.stringify(msg), 'utf8');
  const frame = Buffer.allocUnsafe(5 + data.length);
  frame.writeUInt8(flags, 0);
  frame.writeUInt32BE(data.length, 1);
  data.copy(frame, 5);
  return frame;
}

export function encodeMessage(msg: unknown): Buffer {
  return encodeEnvelope(FLAG_MESSAGE, msg);
}

/** The mandatory last frame of a server stream: `{}` on success, `{error}` on failure. */
export function encodeEndStream(err?: ConnectError): Buffer {
  return encodeEnvelope(FLAG_END_STREAM, err ? { error: errorJson(err) } : {});
}

export interface Envelope {
  flags: number;
  data: Buffer;
}

/** Splits a buffer into whole envelopes; `rest` is an incomplete tail to prepend to the next chunk. */
export function decodeEnvelopes(buf: Buffer): { envelopes: Envelope[]; rest: Buffer } {
  const envelopes: Envelope[] = [];
  let off = 0;
  while (buf.length - off >= 5) {
    const len = buf.readUInt32BE(off + 1);
    if (buf.length - off - 5 < len) break;
    envelopes.push({ flags: buf.readUInt8(off), data: buf.subarray(off + 5, off + 5 + len) });
    off += 5 + len;
  }
  return { envelopes, rest: buf.subarray(off) };
}

/** The single request message of a server-streaming call (the body is one envelope). */
export function decodeStreamRequest(body: Buffer): unknown {
  const { envelopes, rest } = decodeEnvelopes(body);
  if (rest.length > 0) throw new ConnectError('invalid_argument', 'request body ends inside an envelope');
  const first = envelopes[0];
  if (!first || envelopes.length !== 1) throw new ConnectError('invalid_argument', `expected one request envelope, got ${envelopes.length}`);
  if (first.flags & FLAG_COMPRESSED) throw new ConnectError('unimplemented', 'compressed request envelopes are not supported');
  return parseJsonMessage(first.data);
}

export function parseJsonMessage(data: Buffer): unknown {
  if (data.length === 0) return {};
  try {
    return JSON.parse(data.toString('utf8'));
  } catch (e) {
    throw new ConnectError('invalid_argument', `request message is not valid JSON: ${(e as Error).message}`);
  }
}

/**
 * Connect-Timeout-Ms: at most 10 digits per the spec; absent or 0 means no deadline.
 * Returns milliseconds or undefined.
 */
export function parseTimeoutMs(header: string | string[] | undefined): number | undefined {
  const v = Array.isArray(header) ? header[0] : header;
  if (v === undefined || v === '') return undefined;
  if (!/^\d{1,10}$/.test(v)) throw new ConnectError('invalid_argument', `invalid Connect-Timeout-Ms: ${JSON.stringify(v)}`);
  const ms = Number(v);
  return ms === 0 ? undefined : ms;
}

/** Keepalive-Ping-Interval is in seconds (the SDK sends 50); envd's default is 90. Clamped to [1, 90]. */
export function keepaliveIntervalMs(header: string | string[] | undefined): number {
  const v = Number(Array.isArray(header) ? header[0] : header);
  const sec = Number.isFinite(v) && v > 0 ? Math.min(v, 90) : 90;
  return Math.max(1, sec) * 1000;
}
