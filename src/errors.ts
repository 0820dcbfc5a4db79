// The one table of error codes. Numbers follow CubeSandbox's so operators can grep
// across both systems; `http` is the status the API answers with.
import { DEATH_MEANING, type DeathReason, type Tombstone } from './model/death.js';
import { isoTime } from './model/time.js';

export const ErrorTable = {
  BAD_REQUEST: { code: 130400, http: 400, name: 'bad request' },
  UNAUTHORIZED: { code: 130401, http: 401, name: 'unauthorized' },
  FORBIDDEN: { code: 130403, http: 403, name: "forbidden for this key's role" },
  NOT_FOUND: { code: 130404, http: 404, name: 'not found' },
  // A sandbox that ended without its client asking (src/model/death.ts): 404 like any unknown
  // sandbox, so E2B SDKs raise their not-found errors, with the reason in the code and message.
  ENDED_TIMEOUT: { code: 130411, http: 404, name: 'sandbox ended: timeout' },
  ENDED_OOM: { code: 130412, http: 404, name: 'sandbox ended: init OOM-killed' },
  ENDED_INIT_EXITED: { code: 130413, http: 404, name: 'sandbox ended: init exited' },
  ENDED_VM_EXITED: { code: 130414, http: 404, name: 'sandbox ended: microVM exited' },
  ENDED_AGENT_SILENT: { code: 130410, http: 404, name: "sandbox ended: microVM's guest agent silent" },
  ENDED_NODE_LOST: { code: 130415, http: 404, name: 'sandbox ended: node lost' },
  ENDED_DRAIN_EVICTED: { code: 130416, http: 404, name: 'sandbox ended: drain eviction' },
  ENDED_NOT_READOPTED: { code: 130417, http: 404, name: 'sandbox ended: not re-adopted after a node restart' },
  ENDED_OPERATOR_KILLED: { code: 130418, http: 404, name: 'sandbox ended: killed by an operator' },
  ENDED_VANISHED: { code: 130419, http: 404, name: 'sandbox ended: its node stopped listing it' },
  CONFLICT: { code: 130409, http: 409, name: 'conflict' },
  RATE_LIMITED: { code: 130429, http: 429, name: 'rate limited' },
  CONCURRENCY_LIMITED: { code: 130480, http: 429, name: 'concurrency limited' },
  QUOTA_EXCEEDED: { code: 130481, http: 429, name: 'API key quota reached' },
  SANDBOX_BUSY: { code: 130490, http: 503, name: 'sandbox busy' },
  STALE_FENCE: { code: 130491, http: 409, name: 'stale lock fence' },
  EXEC_FAILED: { code: 130497, http: 500, name: 'exec in sandbox failed' },
  CREATE_FAILED: { code: 130507, http: 500, name: 'create sandbox failed' },
  GUEST_BOOT_TIMEOUT: { code: 130508, http: 504, name: 'guest did not come up' },
  DESTROY_FAILED: { code: 130551, http: 500, name: 'destroy sandbox failed' },
  NETWORK_FAILED: { code: 130547, http: 500, name: 'network setup failed' },
  CGROUP_FAILED: { code: 130562, http: 500, name: 'cgroup setup failed' },
  PAUSE_FAILED: { code: 130588, http: 500, name: 'pause failed' },
  RESUME_FAILED: { code: 130589, http: 500, name: 'resume failed' },
  INTERNAL: { code: 130593, http: 500, name: 'internal error' },
  STATE_UNAVAILABLE: { code: 130594, http: 503, name: 'state backend unavailable' },
  NODE_UNREACHABLE: { code: 130596, http: 503, name: 'node unreachable' },
  NO_NODE: { code: 130597, http: 503, name: 'no node available' },
  CONFIG_INVALID: { code: 130483, http: 400, name: 'invalid config' },
  IMAGE_INVALID: { code: 130420, http: 400, name: 'invalid image archive' },
  LAYER_DIGEST_MISMATCH: { code: 130421, http: 400, name: 'layer digest mismatch' },
  TEMPLATE_START_FAILED: { code: 130422, http: 422, name: 'template start command failed' },
  BUILD_STEP_FAILED: { code: 130423, http: 422, name: 'template build step failed' },
  LAYER_CORRUPT: { code: 130424, http: 502, name: 'fetched layer failed verification' },
  LAYER_UNAVAILABLE: { code: 130425, http: 503, name: 'no live node holds the layer' },
  IMAGE_NOT_FOUND: { code: 130426, http: 404, name: 'image or tag not found in the registry' },
  REGISTRY_AUTH: { code: 130427, http: 403, name: 'registry refused the credentials' },
  REGISTRY_UNREACHABLE: { code: 130428, http: 503, name: 'registry unreachable' },
  VOLUME_IN_USE: { code: 130430, http: 409, name: 'volume in use by a sandbox' },
  VOLUME_FULL: { code: 130431, http: 413, name: 'volume full: its size limit is reached' },
  VOLUME_TOO_LARGE: { code: 130432, http: 400, name: "volume size over the store's free space" },
  VOLUME_RUNTIME: { code: 130433, http: 422, name: 'this runtime cannot mount volumes' },
  VOLUME_PLACEMENT: { code: 130434, http: 409, name: 'the volumes of a create are on different nodes' },
  VOLUME_UNAVAILABLE: { code: 130435, http: 422, name: 'no node can hold the volume, or its node is lost' },
  NET_RAW_FORBIDDEN: { code: 130436, http: 403, name: 'raw sockets (cube.net_raw) not allowed on this node' },
  LAYER_TOO_LARGE: { code: 130437, http: 413, name: 'image layers unpack to more than the per-import limit' },
  STORE_FULL: { code: 130598, http: 503, name: 'store full' },
  IDS_EXHAUSTED: { code: 130599, http: 503, name: 'no free sandbox host id range' },
} as const;

export type ErrorKind = keyof typeof ErrorTable;

/** The error kind of each death reason. */
export const DEATH_ERRORS: Readonly<Record<DeathReason, ErrorKind>> = {
  timeout: 'ENDED_TIMEOUT',
  oom: 'ENDED_OOM',
  init_exited: 'ENDED_INIT_EXITED',
  vm_exited: 'ENDED_VM_EXITED',
  agent_silent: 'ENDED_AGENT_SILENT',
  node_lost: 'ENDED_NODE_LOST',
  drain_evicted: 'ENDED_DRAIN_EVICTED',
  not_readopted: 'ENDED_NOT_READOPTED',
  operator_killed: 'ENDED_OPERATOR_KILLED',
  vanished: 'ENDED_VANISHED',
};

export const deathCode = (reason: DeathReason): number => ErrorTable[DEATH_ERRORS[reason]].code;

/** An error that carries a code from the table, a message for humans and optional details for machines. */
export class CubeError extends Error {
  readonly kind: ErrorKind;
  readonly code: number;
  readonly http: number;
  readonly details?: Record<string, unknown>;
  /** Seconds, for 429/503 answers. */
  readonly retryAfter?: number;

  constructor(kind: ErrorKind, message: string, opts: { details?: Record<string, unknown>; retryAfter?: number; cause?: unknown } = {}) {
    super(message, opts.cause === undefined ? undefined : { cause: opts.cause });
    this.name = 'CubeError';
    this.kind = kind;
    this.code = ErrorTable[kind].code;
    this.http = ErrorTable[kind].http;
    if (opts.details) this.details = opts.details;
    if (opts.retryAfter !== undefined) this.retryAfter = opts.retryAfter;
  }
}

export function isCubeError(e: unknown): e is CubeError {
  return e instanceof CubeError;
}

/** A missing sandbox, template, node...: plain (130404) or a sandbox that ended with a reason (1304xx). */
export function isNotFound(e: unknown): e is CubeError {
  return e instanceof CubeError && e.http === 404;
}

/**
 * The answer for a call on a sandbox that died: 404 with the reason's code, and the reason, time
 * and node in the message (E2B SDKs show only the message) and in `details`.
 */
export function deathError(t: Tombstone): CubeError {
  const message = `sandbox ${t.sandboxID} ended: ${t.reason} (${DEATH_MEANING[t.reason]}) at ${isoTime(t.at)} on node ${t.nodeID}${t.message ? `: ${t.message}` : ''}`;
  return new CubeError(DEATH_ERRORS[t.reason], message, {
    details: { sandboxID: t.sandboxID, reason: t.reason, endedAt: isoTime(t.at), nodeID: t.nodeID, ...(t.by !== undefined ? { by: t.by } : {}) },
  });
}

const KIND_BY_CODE = new Map<number, ErrorKind>(Object.entries(ErrorTable).map(([kind, v]) => [v.code, kind as ErrorKind]));

/** The kind whose 1305xx/1304xx code is `code` (an error that crossed a wire by its code); undefined for none. */
export function errorKindOf(code: number): ErrorKind | undefined {
  return KIND_BY_CODE.get(code);
}

/** Wraps anything thrown into a CubeError, keeping CubeErrors as they are. */
export function toCubeError(e: unknown, fallback: ErrorKind = 'INTERNAL'): CubeError {
  if (e instanceof CubeError) return e;
  const msg = e instanceof Error ? e.message : String(e);
  return new CubeError(fallback, msg, { cause: e });
}

/**
 * The JSON body of an error answer. The E2B SDK tests `code` against the HTTP status
 * (404 makes kill() return false, 409 makes pause() return false), so E2B routes put the
 * status in `code` and our reason in `cubeCode`; admin routes put our reason in `code`.
 */
export function errorBody(
  err: CubeError,
  flavour: 'e2b' | 'admin',
): { code: number; message: string; cubeCode?: number; status?: number; details?: Record<string, unknown> } {
  const message = `${err.code} ${err.message}`;
  if (flavour === 'e2b') return { code: err.http, message, cubeCode: err.code, ...(err.details ? { details: err.details } : {}) };
  return { code: err.code, message, status: err.http, ...(err.details ? { details: err.details } : {}) };
}
