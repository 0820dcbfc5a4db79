// The HTTP front door (node:http + find-my-way). Order per request: /health and /metrics
// (no key from loopback), sandbox traffic (envd protocol, authorised by the sandbox's token, not a
// key), then API-key auth (a key record in the state store; failures limited per source address),
// the key's role (the admin API and node-wide policy take an admin key only: 403 otherwise), the
// per-key creates in flight on this replica, and the routes (E2B REST and /admin/v1). A key's
// quotas are claimed by the control plane (control/keys.ts), the same on every replica.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import Router from 'find-my-way';
import { CubeError } from '../errors.js';
import { registerAdminRoutes } from './admin/routes.js';
import { needsAdmin, presentedKey } from './auth.js';
import type { ApiContext, ApiRouter, Caller } from './context.js';
import { registerE2bRoutes } from './e2b/routes.js';
import { e2bTemplateRoutes } from './e2b/templates.js';
import { volumeContentRoute } from './e2b/volumes.js';
import { handleSandboxTraffic, handleSandboxUpgrade, isSandboxTraffic } from './envd/index.js';
import { sendError, sendJson, type Flavour } from '../http.js';
import { createMetrics } from './metrics.js';
import { ConcurrencyLimiter, isCreateLike, RateLimiter } from './rate-limit.js';

export interface ApiServerOptions {
  ctx: ApiContext;
  nodeID: string;
  version: string;
  /** Traffic that authenticates itself (e.g. compute nodes' heartbeats on a control replica), by path prefix; served before API-key auth. */
  extraRoutes?: { prefix: string; handle: (req: IncomingMessage, res: ServerResponse) => void }[];
  /** The DNS listener's query counts (api.dns), exported in /metrics when it runs. */
  dnsQueries?: () => ReadonlyMap<string, number>;
}

export interface ApiServer {
  server: Server;
  listen(host: string, port: number): Promise<AddressInfo>;
  close(): Promise<void>;
}

const flavourOf = (url: string): Flavour => (url.startsWith('/admin/') ? 'admin' : 'e2b');

function isLoopback(req: IncomingMessage): boolean {
  const a = req.socket.remoteAddress ?? '';
  return a === '::1' || a.startsWith('127.') || a.startsWith('::ffff:127.');
}

export function createApiServer(o: ApiServerOptions): ApiServer {
  const { ctx } = o;
  const router: ApiRouter = Router({
    ignoreTrailingSlash: true,
    defaultRoute: (req, res) =>
      sendError(res, new CubeError('NOT_FOUND', `no route for ${req.method} ${(req.url ?? '/').split('?', 1)[0]}`), flavourOf(req.url ?? '/')),
  });
  registerAdminRoutes(router, ctx);
  registerE2bRoutes(router, ctx);
  const templates = e2bTemplateRoutes(ctx);
  templates.register(router);
  const volumeContent = volumeContentRoute(ctx);
  const limiter = new RateLimiter(() => ctx.config().api.rate_limit_per_sec);
  const failures = new RateLimiter(() => ctx.config().api.auth_failures_per_sec);
  const creates = new ConcurrencyLimiter(() => ctx.config().api.create_concurrency_per_key);
  const metrics = createMetrics(ctx.cp, o.dnsQueries);

  const handle = async (req: IncomingMessage & { caller?: Caller }, res: ServerResponse): Promise<void> => {
    const url = req.url ?? '/';
    const path = url.split('?', 1)[0]!;
    if (isSandboxTraffic(req, ctx)) return handleSandboxTraffic(req, res, ctx, failures);
    // Template file uploads carry a signed link instead of a key (the SDK sends none with them).
    const extra = [templates.uploadRoute, volumeContent, ...(o.extraRoutes ?? [])].find((r) => path.startsWith(r.prefix));
    if (extra) return extra.handle(req, res);
    if (path === '/health' && req.method === 'GET') return sendJson(res, 200, { status: 'ok', nodeID: o.nodeID, version: o.version });
    const caller = await authenticate(req);
    if (path === '/metrics' && req.method === 'GET' && (caller?.role === 'admin' || (!caller && isLoopback(req)))) {
      const text = await metrics.registry.metrics();
      res.writeHead(200, { 'content-type': metrics.registry.contentType });
      res.end(text);
      return;
    }
    if (!caller) {
      const blocked = failures.take(sourceOf(req));
      if (blocked > 0) throw tooManyFailures(req, blocked);
      throw new CubeError('UNAUTHORIZED', 'missing or invalid API key (send X-API-Key: <key> or Authorization: Bearer <key>)');
    }
    if (caller.role !== 'admin' && needsAdmin(path))
      throw new CubeError(
        'FORBIDDEN',
        `API key "${caller.name}" (${caller.keyID}) has the role ${caller.role}: ${req.method} ${path} takes an admin key (the admin API, node-wide policy and metrics); cubectl and the console use the admin key in <data-dir>/api-key`,
      );
    const wait = limiter.take(caller.keyID);
    if (wait > 0)
      throw new CubeError('RATE_LIMITED', `more than ${ctx.config().api.rate_limit_per_sec} requests per second for this API key`, { retryAfter: wait });
    if (isCreateLike(req.method, path)) {
      const release = creates.acquire(caller.keyID);
      if (!release)
        throw new CubeError(
          'CONCURRENCY_LIMITED',
          `${creates.inFlight(caller.keyID)} creates already in flight for this API key (api.create_concurrency_per_key)`,
          { retryAfter: 1 },
        );
      res.once('close', release);
    }
    req.caller = caller;
    router.lookup(req, res);
  };

  const sourceOf = (req: IncomingMessage) => req.socket.remoteAddress ?? '';
  const tooManyFailures = (req: IncomingMessage, wait: number) =>
    new CubeError('RATE_LIMITED', `more than ${ctx.config().api.auth_failures_per_sec} failed authentications per second from ${sourceOf(req)}`, {
      retryAfter: wait,
    });
  /**
   * The caller of a request, or undefined. A key this replica does not know from a source over its
   * failure budget is refused before any store lookup: a flood of wrong keys costs no MySQL read each.
   */
  const authenticate = async (req: IncomingMessage): Promise<Caller | undefined> => {
    const k = presentedKey(req);
    if (k === undefined) return undefined;
    if (!ctx.cp.keys.knows(k)) {
      const wait = failures.wait(sourceOf(req));
      if (wait > 0) throw tooManyFailures(req, wait);
    }
    const rec = await ctx.cp.keys.authenticate(k);
    return rec ? { keyID: rec.id, name: rec.name, role: rec.role } : undefined;
  };

  const server = createServer((req, res) => {
    handle(req, res).catch((e: unknown) => sendError(res, e, flavourOf(req.url ?? '/'), ctx.log.child({ method: req.method, url: req.url })));
  });
  server.on('upgrade', (req: IncomingMessage, socket, head) => {
    if (isSandboxTraffic(req, ctx)) {
      handleSandboxUpgrade(req, socket, head, ctx, failures).catch((err: unknown) => {
        ctx.log.warn({ err }, 'sandbox upgrade failed');
        socket.destroy();
      });
      return;
    }
    socket.end('HTTP/1.1 404 Not Found\r\nconnection: close\r\ncontent-length: 0\r\n\r\n');
  });
  // SSE and exec streams stay open for long; a slow request body is still cut off.
  server.requestTimeout = 0;
  server.headersTimeout = 30_000;
  server.keepAliveTimeout = 65_000;

  return {
    server,
    listen: (host, port) =>
      new Promise((resolve, reject) => {
        server.once('error', reject);
        server.listen(port, host, () => {
          server.off('error', reject);
          resolve(server.address() as AddressInfo);
        });
      }),
    close: async () => {
      metrics.close();
      server.closeIdleConnections();
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        // Watch streams and execs never end by themselves.
        setTimeout(() => server.closeAllConnections(), 1000).unref();
      });
    },
  };
}
