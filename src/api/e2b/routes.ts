// The E2B control-plane REST API (both path families: e2b >= 2.51 calls /v2/..., older SDKs
// /sandboxes and /resume). Auth and rate limit are done by the server before these run.
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { HTTPMethod } from 'find-my-way';
import { CubeError, isNotFound } from '../../errors.js';
import type { OutputLine } from '../../cubelet/output-log.js';
import type { SandboxRecord } from '../../model/sandbox.js';
import { isoTime } from '../../model/time.js';
import type { ApiContext, ApiRouter, Caller } from '../context.js';
import { Delivery, readJson, sendError, sendJson, sendNoContent } from '../../http.js';
import { clientKeyOf, CREATE_KEY_HEADER } from '../../control/create-keys.js';
import {
  ConnectSchema,
  ENVD_VERSION,
  NewSandboxSchema,
  RefreshSchema,
  TimeoutSchema,
  detailJson,
  isListed,
  listedJson,
  pageOf,
  parseBody,
  parseListQuery,
  egressOf,
  egressUpdateOf,
  lifecycleOf,
  NetworkUpdateSchema,
  PauseSchema,
  refuseMemoryless,
  refuseUnsupported,
  sandboxIDParam,
  sandboxJson,
} from './wire.js';
import { MetricsHistory } from './metrics.js';
import { registerSnapshotRoutes } from './snapshots.js';
import { registerVolumeRoutes } from './volumes.js';
import { registerLifecycleRoutes } from './events.js';

type Req = IncomingMessage & { caller?: Caller };
type Route = (req: Req, res: ServerResponse, id: string, query: URLSearchParams, params: Record<string, string | undefined>) => Promise<void>;

export function registerE2bRoutes(router: ApiRouter, ctx: ApiContext): void {
  const history = new MetricsHistory();
  const domain = (): string => ctx.config().api.sandbox_domain;
  const on = (method: HTTPMethod, paths: string[], fn: Route): void => {
    for (const p of paths) {
      router.on(method, p, (req, res, params) => {
        const query = new URL(req.url ?? '/', 'http://x').searchParams;
        const run = async (): Promise<void> => fn(req as Req, res, params.id === undefined ? '' : sandboxIDParam(params.id), query, params);
        run().catch((e: unknown) => sendError(res, e, 'e2b', ctx.log));
      });
    }
  };
  const actor = (req: Req): string | undefined => req.caller?.keyID;
  // A sandbox on its way out (timeout reached, kill under way) is already gone for E2B clients.
  // A user key sees the sandboxes it created and no other (E2B: a key sees its team's): another
  // key's is not found, and lists leave it out. Admin keys see every one (operators, cubectl).
  const mine = (req: Req, rec: SandboxRecord): boolean => req.caller?.role !== 'user' || rec.owner === req.caller.keyID;
  const owned = async (id: string, req: Req): Promise<SandboxRecord> => {
    const rec = await ctx.cp.getSandbox(id);
    if (!mine(req, rec)) throw new CubeError('NOT_FOUND', `sandbox ${id} not found`);
    return rec;
  };
  const fresh = async (id: string, req: Req): Promise<SandboxRecord> => {
    const rec = await owned(id, req);
    if (!isListed(rec.state)) throw new CubeError('NOT_FOUND', `sandbox ${id} not found (${rec.state})`);
    return rec;
  };

  /** What a sandbox's processes printed; nothing once the sandbox is gone (its node dropped the ring). */
  const processOutputOf = async (id: string): Promise<OutputLine[]> => {
    try {
      return await (await ctx.cp.nodeFor(id)).processOutput(id);
    } catch (e) {
      if (isNotFound(e)) return [];
      throw e;
    }
  };

  on('POST', ['/sandboxes', '/v2/sandboxes'], async (req, res) => {
    const answer = new Delivery(res);
    const { signal } = answer;
    const b = parseBody(NewSandboxSchema, await readJson(req), 'sandbox create body');
    refuseUnsupported(b);
    const key = clientKeyOf(req.headers[CREATE_KEY_HEADER], b.metadata);
    const rec = await ctx.cp.createSandbox({
      signal,
      answer,
      ...(key !== undefined ? { idempotencyKey: key } : {}),
      ...(b.templateID ? { templateID: b.templateID } : {}),
      ...(b.timeout !== undefined ? { timeoutSec: b.timeout } : {}),
      ...(b.cpuCount !== undefined ? { cpus: b.cpuCount } : {}),
      ...(b.memoryMB !== undefined ? { memoryMiB: b.memoryMB } : {}),
      ...(b.metadata ? { metadata: b.metadata } : {}),
      // E2B has no runtime field: the metadata label cube.runtime chooses (ns, microvm).
      ...(b.metadata?.['cube.runtime'] !== undefined ? { runtime: b.metadata['cube.runtime'] } : {}),
      ...(b.envVars ? { envVars: b.envVars } : {}),
      ...(b.volumeMounts?.length ? { volumeMounts: b.volumeMounts } : {}),
      ...egressOf(b),
      ...lifecycleOf(b),
      ...(b.network?.allowPublicTraffic === false ? { allowPublicTraffic: false } : {}),
      ...(actor(req) ? { actor: actor(req) } : {}),
    });
    sendJson(res, 201, sandboxJson(rec, domain()));
    answer.sent();
  });

  on('GET', ['/v2/sandboxes'], async (req, res, _id, query) => {
    const q = parseListQuery(query, ['running', 'paused']);
    const page = pageOf(
      (await ctx.cp.listSandboxes()).filter((r) => mine(req, r)),
      q,
    );
    const all = (await ctx.cp.listSandboxes({ state: ['running'] })).filter((r) => mine(req, r));
    const headers: Record<string, string> = { 'x-total-running': String(all.length) };
    if (page.nextToken) headers['x-next-token'] = page.nextToken;
    sendJson(res, 200, page.items.map(listedJson), headers);
  });

  // v1 list: running sandboxes only, no paging (what e2b 1.x reads).
  on('GET', ['/sandboxes'], async (req, res, _id, query) => {
    const q = parseListQuery(query, ['running']);
    sendJson(
      res,
      200,
      pageOf(
        (await ctx.cp.listSandboxes()).filter((r) => mine(req, r)),
        { ...q, limit: Number.MAX_SAFE_INTEGER },
      ).items.map(listedJson),
    );
  });

  on('GET', ['/sandboxes/:id'], async (req, res, id) => {
    sendJson(res, 200, detailJson(await fresh(id, req), domain()));
  });

  on('DELETE', ['/sandboxes/:id'], async (req, res, id) => {
    // A missing or already dying sandbox is a 404 body, which makes the SDK's kill() return false;
    // one whose delete a client asked before and was accepted is deleted: done again (204), the
    // answer a retry needs (its first answer lost, or an error after the delete was remembered).
    try {
      await fresh(id, req);
      await ctx.cp.destroySandbox(id, actor(req));
    } catch (e) {
      if (!isNotFound(e)) throw e;
      const accepted = await ctx.cp.deleteAccepted(id);
      if (!accepted || (req.caller?.role === 'user' && accepted.owner !== req.caller.keyID)) throw e;
    }
    sendNoContent(res);
  });

  on('POST', ['/sandboxes/:id/timeout'], async (req, res, id) => {
    const b = parseBody(TimeoutSchema, await readJson(req), 'timeout body');
    await owned(id, req);
    await ctx.cp.setTimeout(id, b.timeout);
    sendNoContent(res);
  });

  on('PUT', ['/sandboxes/:id/network'], async (req, res, id) => {
    const b = parseBody(NetworkUpdateSchema, await readJson(req), 'network body');
    await fresh(id, req);
    await ctx.cp.setEgress(id, egressUpdateOf(b));
    sendNoContent(res);
  });

  // Legacy keep-alive: extends the lifetime to now + duration, never shortens it.
  on('POST', ['/sandboxes/:id/refreshes'], async (req, res, id) => {
    const b = parseBody(RefreshSchema, await readJson(req), 'refresh body');
    const duration = b.duration ?? ctx.config().sandbox.default_timeout_sec;
    await extendTo(ctx, await fresh(id, req), duration);
    sendNoContent(res);
  });

  on('POST', ['/sandboxes/:id/pause'], async (req, res, id) => {
    refuseMemoryless(parseBody(PauseSchema, await readJson(req), 'pause body'), 'pause');
    const rec = await fresh(id, req);
    if (rec.state === 'paused' || rec.state === 'pausing') throw new CubeError('CONFLICT', `sandbox ${id} is already ${rec.state}`);
    // The SDK's pause() gives the memory back where the runtime can (a microVM's goes to disk).
    await ctx.cp.pauseSandbox(id, actor(req), { release: true });
    sendNoContent(res);
  });

  // connect: 200 when it was running (lifetime only extended), 201 when it was resumed.
  on('POST', ['/sandboxes/:id/connect', '/v2/sandboxes/:id/connect'], async (req, res, id) => {
    const b = parseBody(ConnectSchema, await readJson(req), 'connect body');
    refuseMemoryless(b, 'resume');
    const timeout = b.timeout ?? ctx.config().sandbox.default_timeout_sec;
    const rec = await fresh(id, req);
    if (rec.state === 'running') {
      sendJson(res, 200, sandboxJson(await extendTo(ctx, rec, timeout), domain()));
      return;
    }
    const r = await ctx.cp.resumeSandbox(id, timeout, actor(req));
    sendJson(res, r.resumed ? 201 : 200, sandboxJson(r.sandbox, domain()));
  });

  // e2b 2.0-2.5: resume a paused sandbox; 409 when it is already running.
  on('POST', ['/sandboxes/:id/resume'], async (req, res, id) => {
    const b = parseBody(ConnectSchema, await readJson(req), 'resume body');
    refuseMemoryless(b, 'resume');
    const rec = await fresh(id, req);
    if (rec.state === 'running') throw new CubeError('CONFLICT', `sandbox ${id} is already running`);
    const r = await ctx.cp.resumeSandbox(id, b.timeout ?? ctx.config().sandbox.default_timeout_sec, actor(req));
    sendJson(res, 201, sandboxJson(r.sandbox, domain()));
  });

  on('GET', ['/sandboxes/:id/metrics'], async (req, res, id, query) => {
    const rec = await fresh(id, req);
    const node = await ctx.cp.nodeFor(id);
    // None for a paused sandbox or a node that cannot measure.
    if (rec.state !== 'running' || !node.sandboxStats) return sendJson(res, 200, []);
    const sec = (k: string): number | undefined => {
      const v = query.get(k);
      if (v === null || v === '') return undefined;
      const n = Number(v);
      if (!Number.isInteger(n) || n < 0) throw new CubeError('BAD_REQUEST', `${k} must be unix seconds (got ${JSON.stringify(v)})`);
      return n;
    };
    const read = () => node.sandboxStats!(id);
    sendJson(res, 200, await history.query(id, { cpus: rec.spec.cpus, diskGiB: rec.spec.diskGiB }, read, sec('start'), sec('end')));
  });

  // A sandbox's logs, as the CLI's `sandbox logs` reads them, oldest first: its lifecycle events
  // (create, pause, resume, timeout, OOM, network changes, destroy) from the event stream, kept
  // after the sandbox is gone for as long as the stream holds them (10 000 events), and its
  // processes' starts, output lines and ends, from the node's ring while the sandbox exists.
  on('GET', ['/sandboxes/:id/logs', '/v2/sandboxes/:id/logs'], async (req, res, id, query) => {
    // Another key's live sandbox is not found; a gone one's lifecycle lines stay readable by id.
    const rec = await ctx.cp.getSandbox(id).catch(() => undefined);
    if (rec && !mine(req, rec)) throw new CubeError('NOT_FOUND', `sandbox ${id} not found`);
    const start = Number(query.get('start') ?? 0);
    const limit = Math.min(Number(query.get('limit') ?? 1000) || 1000, 10_000);
    const events = (await ctx.cp.events({ limit: 10_000 })).filter((e) => e.sandboxID === id);
    const lifecycle = events.map((e) => ({
      timestamp: isoTime(e.at),
      level: e.code !== undefined ? 'error' : 'info',
      message: `${e.kind}: ${e.message}`,
      fields: { logger: 'lifecycle', kind: e.kind, ...(e.code !== undefined ? { code: String(e.code) } : {}), ...(e.nodeID ? { nodeID: e.nodeID } : {}) },
    }));
    const processes = (await processOutputOf(id)).map((l) => ({
      timestamp: l.at,
      level: l.stream === 'stderr' ? 'warn' : 'info',
      message: l.stream === 'process' ? `process ${l.pid} ${l.line}` : l.line,
      fields: { logger: 'process', pid: String(l.pid), stream: l.stream },
    }));
    const entries = [...lifecycle, ...processes]
      .filter((x) => Date.parse(x.timestamp) >= start)
      .sort((a, b) => (a.timestamp < b.timestamp ? -1 : a.timestamp > b.timestamp ? 1 : 0))
      .slice(-limit);
    sendJson(res, 200, {
      logs: entries.map((x) => ({ timestamp: x.timestamp, line: JSON.stringify({ level: x.level, message: x.message, ...x.fields }) })),
      logEntries: entries,
    });
  });

  registerSnapshotRoutes(on, ctx, fresh, domain);
  registerVolumeRoutes(on, ctx);
  registerLifecycleRoutes(on, ctx);

  // E2B's secrets API (the SDK's Secret class): not implemented; a 404 that says so rather than "no route".
  const noSecrets: Route = async (req) => {
    throw new CubeError(
      'NOT_FOUND',
      `cubed does not implement E2B's secrets API (${req.method} ${(req.url ?? '').split('?', 1)[0]}): pass values to sandboxes as envs at create`,
    );
  };
  for (const method of ['GET', 'POST'] as const) on(method, ['/secrets'], noSecrets);
  for (const method of ['GET', 'POST', 'DELETE'] as const) on(method, ['/secrets/:secretID'], noSecrets);
}

/** Sets the end to now + seconds only when that is later than the current end. */
async function extendTo(ctx: ApiContext, rec: SandboxRecord, seconds: number): Promise<SandboxRecord> {
  if (Date.now() + seconds * 1000 <= rec.endAt) return rec;
  return ctx.cp.setTimeout(rec.sandboxID, seconds);
}
