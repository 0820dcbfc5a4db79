// Sandbox traffic: everything the SDK sends to E2B_SANDBOX_URL (envd's Connect RPC, /files,
// /health) and to other sandbox ports. Not API-key authenticated: as envd does, every envd
// route but /health needs the sandbox's access token (X-Access-Token), and /files also takes a
// URL the token pre-signed (uploadUrl/downloadUrl; such a URL names no sandbox, so the one
// whose token verifies it is looked up). Other ports are public, as E2B's proxy serves them.
// Paused, dead or unknown sandboxes get 502, which the SDK turns into "sandbox not found / timed out".
import { timingSafeEqual } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { Readable, type Duplex } from 'node:stream';
import { CubeError, errorBody, isNotFound, toCubeError } from '../../errors.js';
import type { SandboxRecord, SandboxState } from '../../model/sandbox.js';
import type { NodeApi } from '../../cubelet/types.js';
import type { ApiContext } from '../context.js';
import { sendError, sendJson, sendNoContent } from '../../http.js';
import { proxyHttp, proxyUpgrade, rejectUpgrade, upstreamOf } from '../../cubelet/port-proxy.js';
import type { RateLimiter } from '../rate-limit.js';
import { handleFiles } from './files.js';
import { filesystemService } from './filesystem.js';
import { Filesystem } from './gen/filesystem/filesystem_pb.js';
import { Process } from './gen/process/process_pb.js';
import { SANDBOX, processService, type SandboxCall } from './process.js';
import { connectServer } from './rpc.js';
import { checkFileSignature, signedFileRequest, type SignedFileRequest } from './signature.js';
import { ENVD_PORT, targetOf, type Target } from './target.js';

const serveRpc = connectServer(SANDBOX, (router) => {
  router.service(Process, processService);
  router.service(Filesystem, filesystemService);
});
/** The paths the Connect services answer; anything else is a 404 in the E2B error shape. */
const RPC_PATH = new RegExp(`^/(${[Process, Filesystem].map((s) => s.typeName.replace('.', '\\.')).join('|')})/\\w+$`);

export function isSandboxTraffic(req: IncomingMessage, ctx: ApiContext): boolean {
  return targetOf(req.headers, ctx.config().api.sandbox_domain) !== undefined || signedFileRequest(req.method, req.url ?? '/') !== undefined;
}

/** A request that cannot reach a live sandbox: the status and E2B-proxy-shaped body to answer with. */
class Refusal extends Error {
  constructor(
    readonly status: number,
    readonly body: Record<string, unknown>,
    /** The request presented a wrong traffic token (counts against its address). */
    readonly badToken = false,
  ) {
    super(String(body.message));
  }
}

/** The sandbox died (it has a tombstone): `error` is its 404 with the reason (src/errors.ts deathError). */
class Ended extends Error {
  constructor(readonly error: CubeError) {
    super(error.message);
  }
}

/**
 * Calls on a sandbox that died: envd's calls answer the reason as not found, which the SDK raises
 * as its NotFoundError with the message (commands.run, files.*: a Connect `not_found`, a 404 on
 * /files). /health stays 502 (the SDK's isRunning() reads that as "not running"), and so do
 * other ports (E2B's proxy answers those), with the reason in the message.
 */
function serveEnded(req: IncomingMessage, res: ServerResponse, ctx: ApiContext, err: CubeError): void {
  const path = (req.url ?? '/').split('?')[0] ?? '/';
  const port = targetOf(req.headers, ctx.config().api.sandbox_domain)?.port ?? ENVD_PORT;
  const sandboxID = String(err.details?.sandboxID ?? '');
  if (port !== ENVD_PORT || path === '/health')
    return sendJson(res, 502, { sandboxId: sandboxID, message: `The sandbox was not found: ${err.message}`, code: 502, cubeCode: err.code });
  if (RPC_PATH.test(path)) return serveRpc(req, res, { node: endedNode(err), sandboxID });
  sendError(res, err, 'e2b', ctx.log);
}

/** A node whose every call fails with `err` (the services turn it into their protocol's error). */
function endedNode(err: CubeError): NodeApi {
  return new Proxy({} as NodeApi, { get: (_t, prop) => (prop === 'then' ? undefined : () => Promise.reject(err)) });
}

const gone = (sandboxID: string, why: string): Refusal => new Refusal(502, { sandboxId: sandboxID, message: `The sandbox was not found: ${why}`, code: 502 });

/**
 * token → sandboxID, for SDKs that send only X-Access-Token; rebuilt from the list on a miss.
 * Misses arriving together share one rebuild, and a source address past its failure budget
 * gets no lookup at all (guarded), so a flood of wrong tokens costs no listing each.
 */
const tokenIndex = new WeakMap<ApiContext, { map: Map<string, string>; rebuild?: Promise<Map<string, string>> }>();

async function findByToken(ctx: ApiContext, token: string): Promise<string | undefined> {
  let index = tokenIndex.get(ctx);
  const hit = index?.map.get(token);
  if (hit) return hit;
  if (!index) tokenIndex.set(ctx, (index = { map: new Map() }));
  const idx = index;
  idx.rebuild ??= ctx.cp
    .listSandboxes()
    .then((all) => (idx.map = new Map(all.map((s) => [s.accessToken, s.sandboxID]))))
    .finally(() => (idx.rebuild = undefined));
  return (await idx.rebuild).get(token);
}

/** Failed authentications per source address (api.auth_failures_per_sec). */
interface FailureGuard {
  /** Throws 429 when the address is past its budget (before an expensive lookup). */
  check(): void;
  /** Counts one failure; true when the address is now past its budget. */
  failed(): boolean;
}

function guardOf(req: IncomingMessage, failures: RateLimiter, ctx: ApiContext): FailureGuard {
  const from = req.socket.remoteAddress ?? '';
  const limited = (wait: number) =>
    new CubeError('RATE_LIMITED', `more than ${ctx.config().api.auth_failures_per_sec} failed sandbox authentications per second from ${from}`, {
      retryAfter: wait,
    });
  return {
    check: () => {
      const wait = failures.wait(from);
      if (wait > 0) throw limited(wait);
    },
    failed: () => failures.take(from) > 0,
  };
}

/** An answer for an unknown token or a wrong token or signature: those count against the address. */
const isAuthFailure = (e: unknown): boolean => (e instanceof Refusal && e.badToken) || (e instanceof CubeError && e.kind === 'UNAUTHORIZED');

async function recordOf(ctx: ApiContext, sandboxID: string): Promise<SandboxRecord | undefined> {
  try {
    return await ctx.cp.getSandbox(sandboxID);
  } catch (e) {
    if (e instanceof CubeError && e.kind === 'NOT_FOUND') return undefined;
    // A sandbox that died: its envd calls answer 404 with the reason (serveEnvd), not 502.
    if (isNotFound(e)) throw new Ended(e);
    throw e;
  }
}

/** The running sandbox whose token verifies a pre-signed /files URL. */
async function findBySignature(ctx: ApiContext, signed: SignedFileRequest): Promise<string | undefined> {
  const now = Math.floor(Date.now() / 1000);
  return (await ctx.cp.listSandboxes()).find((s) => s.state === 'running' && checkFileSignature(signed, s.accessToken, now) !== 'mismatch')?.sandboxID;
}

const AUTO_RESUME_WAIT_MS = 10_000;
const AUTO_RESUME_TRIES = 3;

/**
 * E2B autoResume: the first request for a paused sandbox resumes it (with the default timeout
 * from now); one still pausing (its timeout just fired) is resumed once the pause is done.
 * Requests arriving together all wait for the one resume; a resume refused (the node's
 * release-ratio policy) a few times over answers 502 with the reason. `state`: the sandbox's
 * state as its node just said, for a record that has not caught up yet.
 */
async function autoResume(ctx: ApiContext, sandboxID: string, state?: SandboxState): Promise<void> {
  const t0 = Date.now();
  let why = '';
  let tries = 0;
  for (let known = state; ; known = undefined) {
    const rec = await recordOf(ctx, sandboxID);
    const seen = known ?? rec?.state;
    if (seen === 'running') return;
    const waiting = rec !== undefined && (seen === 'paused' || seen === 'pausing' || seen === 'resuming');
    if (!waiting || tries >= AUTO_RESUME_TRIES || Date.now() - t0 > AUTO_RESUME_WAIT_MS) {
      throw gone(sandboxID, `sandbox ${sandboxID} is ${seen ?? 'gone'} and could not be resumed${why ? `: ${why}` : ''}`);
    }
    // The control plane asks the node when the record is not `paused`, and the node's resume
    // waits for a pause in progress.
    if (seen === 'paused' || seen === 'pausing') {
      tries++;
      // Losing the race to another request's resume is fine: the loop then sees it running.
      const ok = await ctx.cp.resumeSandbox(sandboxID, ctx.config().sandbox.default_timeout_sec, 'system:auto-resume').then(
        () => true,
        (e: unknown) => ((why = (e as Error).message), false),
      );
      if (ok) return;
    }
    await new Promise((r) => setTimeout(r, 100));
  }
}

/**
 * The node of an autoResume sandbox as its envd traffic calls it. The record the request was
 * admitted on lags the node by up to a heartbeat, so a sandbox its timeout paused a moment ago
 * can still read `running`: a call the node refuses (130409 "paused; resume it first", or busy
 * while pausing) resumes the sandbox if the node has it paused or pausing, and is made once
 * more. Reading the node's state before every request instead cost a node call (an RPC in a
 * cluster) per request of every autoResume sandbox.
 */
function resumingNode(ctx: ApiContext, node: NodeApi, sandboxID: string): NodeApi {
  const resumedAfter = async (e: unknown): Promise<boolean> => {
    if (!(e instanceof CubeError) || (e.kind !== 'CONFLICT' && e.kind !== 'SANDBOX_BUSY')) return false;
    const state = (await node.getSandbox(sandboxID))?.state;
    if (state !== 'paused' && state !== 'pausing') return false;
    await autoResume(ctx, sandboxID, state);
    return true;
  };
  return new Proxy(node, {
    get(target, prop, receiver) {
      const value: unknown = Reflect.get(target, prop, receiver);
      if (typeof value !== 'function') return value;
      return (...args: unknown[]) => {
        const first: unknown = value.apply(target, args);
        if (!(first instanceof Promise)) return first;
        return first.catch(async (e: unknown) => {
          // A body the refused call began to read (a cluster node's upload) cannot be sent again.
          if (args.some((a) => a instanceof Readable && a.readableDidRead)) throw e;
          if (!(await resumedAfter(e))) throw e;
          return value.apply(target, args) as unknown;
        });
      };
    },
  });
}

/** E2B's header for a sandbox created with allowPublicTraffic false (its ports other than envd's). */
export const TRAFFIC_TOKEN_HEADER = 'e2b-traffic-access-token';

const headerOf = (h: IncomingMessage['headers'], name: string): string | undefined => {
  const v = h[name];
  return Array.isArray(v) ? v[0] : v;
};

/**
 * A port of a sandbox whose create said allowPublicTraffic false answers only requests carrying
 * its traffic access token: refused otherwise with E2B's 403 body (compared in constant time).
 */
function checkTrafficToken(rec: SandboxRecord, given: string | undefined): void {
  const want = rec.trafficAccessToken;
  if (want === undefined) return;
  // A wrong token counts against the caller's address as a wrong access token does.
  const refuse = (message: string, badToken: boolean) => new Refusal(403, { sandboxId: rec.sandboxID, message, code: 403 }, badToken);
  if (!given) throw refuse(`Sandbox is secured with traffic access token. Token header '${TRAFFIC_TOKEN_HEADER}' is missing`, false);
  const a = Buffer.from(given);
  const b = Buffer.from(want);
  if (a.length !== b.length || !timingSafeEqual(a, b))
    throw refuse(`Sandbox is secured with traffic access token. Provided token in header '${TRAFFIC_TOKEN_HEADER}' is invalid`, true);
}

/** What a request carries to reach a sandbox: its routing headers, and a /files signature if any. */
interface Access {
  headers: IncomingMessage['headers'];
  target?: Target;
  signed?: SignedFileRequest;
  /** An envd route that needs the token (all but /health). */
  envdAuth: boolean;
}

function accessOf(req: IncomingMessage, ctx: ApiContext): Access {
  const target = targetOf(req.headers, ctx.config().api.sandbox_domain);
  const signed = signedFileRequest(req.method, req.url ?? '/');
  const envdAuth = (req.url ?? '/').split('?')[0] !== '/health';
  return { headers: req.headers, ...(target ? { target } : {}), ...(signed ? { signed } : {}), envdAuth };
}

/** The live sandbox a request is for, its node, and the port it wants; a Refusal otherwise. */
async function resolve(ctx: ApiContext, a: Access, guard: FailureGuard): Promise<{ call: Omit<SandboxCall, 'user'>; port: number }> {
  const t = a.target;
  if (!t && !a.signed) throw new CubeError('BAD_REQUEST', 'not sandbox traffic: no E2b-Sandbox-Id, X-Access-Token, sandbox Host or signed /files URL');
  if (t && Number.isNaN(t.port)) throw new CubeError('BAD_REQUEST', 'E2b-Sandbox-Port must be a port number');
  if (t?.by !== 'id') guard.check();
  const sandboxID = t?.by === 'id' ? t.sandboxID : t?.by === 'token' ? await findByToken(ctx, t.token) : await findBySignature(ctx, a.signed!);
  if (!sandboxID) {
    if (!t) throw new CubeError('UNAUTHORIZED', 'the /files signature matches no running sandbox (wrong, or signed for another path, operation or user)');
    // A client error (was 502, E2B's proxy's answer for an unknown sandbox: read as a node fault).
    throw new CubeError('UNAUTHORIZED', 'no running sandbox has this access token (X-Access-Token); send E2b-Sandbox-Id with it');
  }
  const rec = await recordOf(ctx, sandboxID);
  if (!rec) throw gone(sandboxID, `sandbox ${sandboxID} does not exist`);
  const token = t?.token;
  if (token !== undefined && token !== rec.accessToken) throw new CubeError('UNAUTHORIZED', `X-Access-Token does not match sandbox ${sandboxID}`);
  const port = t?.port ?? ENVD_PORT;
  // Before an autoResume: a request without the sandbox's traffic token wakes nothing.
  if (port !== ENVD_PORT) checkTrafficToken(rec, headerOf(a.headers, TRAFFIC_TOKEN_HEADER));
  if (rec.state !== 'running') {
    if (!rec.lifecycle?.autoResume || !['paused', 'pausing', 'resuming'].includes(rec.state)) throw gone(sandboxID, `sandbox ${sandboxID} is ${rec.state}`);
    await autoResume(ctx, sandboxID);
  }
  if (port === ENVD_PORT && a.envdAuth && token === undefined) {
    if (!a.signed) throw new CubeError('UNAUTHORIZED', `envd of sandbox ${sandboxID} needs its access token (X-Access-Token)`);
    const check = checkFileSignature(a.signed, rec.accessToken, Math.floor(Date.now() / 1000));
    if (check === 'mismatch') throw new CubeError('UNAUTHORIZED', `the /files signature does not match sandbox ${sandboxID} (path, operation or user differ)`);
    if (check === 'expired') throw new CubeError('UNAUTHORIZED', `the /files signature expired at ${new Date(a.signed.expiration! * 1000).toISOString()}`);
  }
  const node = await ctx.cp.nodeFor(sandboxID);
  return { call: { node: rec.lifecycle?.autoResume ? resumingNode(ctx, node, sandboxID) : node, sandboxID }, port };
}

/** Resolves the request's sandbox; failed authentications are counted, and past the budget answered with 429. */
async function resolveGuarded(req: IncomingMessage, ctx: ApiContext, failures: RateLimiter): ReturnType<typeof resolve> {
  const guard = guardOf(req, failures, ctx);
  try {
    return await resolve(ctx, accessOf(req, ctx), guard);
  } catch (e) {
    if (isAuthFailure(e) && guard.failed()) guard.check();
    throw e;
  }
}

export async function handleSandboxTraffic(req: IncomingMessage, res: ServerResponse, ctx: ApiContext, failures: RateLimiter): Promise<void> {
  try {
    const { call, port } = await resolveGuarded(req, ctx, failures);
    if (port !== ENVD_PORT) {
      await proxyHttp(req, res, call.sandboxID, port, await upstreamOf(call.node, call.sandboxID, port, req.url ?? '/'));
      return;
    }
    await serveEnvd(req, res, call);
  } catch (e) {
    if (e instanceof Refusal) sendJson(res, e.status, e.body);
    else if (e instanceof Ended) serveEnded(req, res, ctx, e.error);
    else sendError(res, e, 'e2b', ctx.log);
  }
}

async function serveEnvd(req: IncomingMessage, res: ServerResponse, call: Omit<SandboxCall, 'user'>): Promise<void> {
  const path = (req.url ?? '/').split('?')[0];
  if (path === '/health') return sendNoContent(res);
  if (path === '/files') return handleFiles(req, res, { ...call, user: 'user' });
  if (!RPC_PATH.test(path ?? '')) throw new CubeError('NOT_FOUND', `envd has no route ${req.method} ${path}`);
  serveRpc(req, res, call);
}

export async function handleSandboxUpgrade(req: IncomingMessage, socket: Duplex, head: Buffer, ctx: ApiContext, failures: RateLimiter): Promise<void> {
  try {
    const { call, port } = await resolveGuarded(req, ctx, failures);
    if (port === ENVD_PORT) throw new CubeError('BAD_REQUEST', `port ${ENVD_PORT} (envd) takes no upgrades`);
    proxyUpgrade(req, socket, head, call.sandboxID, port, await upstreamOf(call.node, call.sandboxID, port, req.url ?? '/'));
  } catch (e) {
    if (e instanceof Refusal) rejectUpgrade(socket, e.status, e.body);
    else if (e instanceof Ended)
      rejectUpgrade(socket, 502, {
        sandboxId: String(e.error.details?.sandboxID ?? ''),
        message: `The sandbox was not found: ${e.error.message}`,
        code: 502,
        cubeCode: e.error.code,
      });
    else {
      const err = toCubeError(e);
      rejectUpgrade(socket, err.http, errorBody(err, 'e2b'));
    }
  }
}
