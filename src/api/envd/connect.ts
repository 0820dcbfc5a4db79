// What cubed adds to the Connect protocol (served by @connectrpc/connect-node, see rpc.ts):
// the Connect code of each CubeError kind, and envd's keepalive interval. Pure.
import { Code, ConnectError } from '@connectrpc/connect';
import { CubeError, type ErrorKind } from '../../errors.js';

export { Code, ConnectError };

const CODE_OF_KIND: Partial<Record<ErrorKind, Code>> = {
  BAD_REQUEST: Code.InvalidArgument,
  UNAUTHORIZED: Code.Unauthenticated,
  NOT_FOUND: Code.NotFound,
  CONFLICT: Code.FailedPrecondition,
  RATE_LIMITED: Code.ResourceExhausted,
  CONCURRENCY_LIMITED: Code.ResourceExhausted,
  SANDBOX_BUSY: Code.Unavailable,
  STATE_UNAVAILABLE: Code.Unavailable,
  NODE_UNREACHABLE: Code.Unavailable,
  NO_NODE: Code.Unavailable,
  CONFIG_INVALID: Code.InvalidArgument,
};

/** Any thrown value as a Connect error; CubeErrors keep their 1305xx code in the message. */
export function toConnectError(e: unknown): ConnectError {
  if (e instanceof ConnectError) return e;
  // A sandbox that ended (1304xx): not_found, which the SDK raises as its NotFoundError with this message.
  if (e instanceof CubeError) return new ConnectError(`${e.code} ${e.message}`, CODE_OF_KIND[e.kind] ?? (e.http === 404 ? Code.NotFound : Code.Internal));
  return new ConnectError(e instanceof Error ? e.message : String(e), Code.Internal);
}

/** Keepalive-Ping-Interval is in seconds (the SDK sends 50); envd's default is 90. Clamped to [1, 90]. */
export function keepaliveIntervalMs(header: string | null | undefined): number {
  const v = Number(header ?? undefined);
  const sec = Number.isFinite(v) && v > 0 ? Math.min(v, 90) : 90;
  return Math.max(1, sec) * 1000;
}
