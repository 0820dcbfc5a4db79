// Connection loss on Redis or MySQL becomes a 503 with code 130594 after a few quick retries,
// never a hang and never a raw driver error.
import { CubeError } from '../../errors.js';

const CONNECTION_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'EPIPE',
  'ETIMEDOUT',
  'ENOTFOUND',
  'PROTOCOL_CONNECTION_LOST',
  'ER_SERVER_SHUTDOWN',
  'ER_CON_COUNT_ERROR',
  'ER_SERVER_GONE_ERROR',
]);

/** Whether an error means "the backend is not reachable right now" rather than "the request was wrong". */
export function isConnectionError(e: unknown): boolean {
  if (e instanceof CubeError) return e.kind === 'STATE_UNAVAILABLE';
  const err = e as { code?: string; message?: string; fatal?: boolean } | null | undefined;
  if (err?.code && CONNECTION_CODES.has(err.code)) return true;
  if (err?.fatal) return true;
  const msg = err?.message ?? '';
  return /isn't writeable|Connection is closed|closed state|connect ECONNREFUSED|MaxRetriesPerRequest|Pool is closed|read ECONNRESET/i.test(msg);
}

export function unavailable(backend: string, e: unknown): CubeError {
  return new CubeError('STATE_UNAVAILABLE', `${backend} unavailable: ${e instanceof Error ? e.message : String(e)}`, { retryAfter: 1, cause: e });
}

export const RETRY_DELAYS_MS = [50, 150, 400];

/**
 * Runs `op`, retrying connection errors with backoff; other errors pass through.
 * `idempotent: false` (appends) makes one attempt only: a retry could write twice.
 */
export async function withRetry<T>(backend: string, op: () => Promise<T>, idempotent = true): Promise<T> {
  for (let attempt = 0; ; attempt++) {
    try {
      return await op();
    } catch (e) {
      if (!isConnectionError(e)) throw e;
      if (!idempotent || attempt >= RETRY_DELAYS_MS.length) throw e instanceof CubeError ? e : unavailable(backend, e);
      await new Promise((r) => setTimeout(r, RETRY_DELAYS_MS[attempt]));
    }
  }
}
