// /admin/v1: nodes, sandboxes (with exec as an NDJSON stream), config, events, stats,
// templates and the watch stream. Bodies are checked with zod; every answer is JSON and every
// error `{code, message, status}` (src/errors.ts).
import type { IncomingMessage, ServerResponse } from 'node:http';
import { z } from 'zod';
import { CubeError, errorBody } from '../../errors.js';
import type { SandboxUsage, SnapshotRecord } from '../../model/sandbox.js';
import type { SandboxState, SnapshotView } from '../types.js';
import type { ApiContext, ApiRouter, Caller, Handler } from '../context.js';
import { Delivery, readJson, sendError, sendJson, sendNoContent, writeWaiting } from '../../http.js';
import { clientKeyOf, CREATE_KEY_HEADER } from '../../control/create-keys.js';
import { body } from './body.js';
import { registerKeyRoutes } from './keys.js';
import { registerVolumeAdminRoutes } from './volumes.js';
import { registerTemplateRoutes } from './templates.js';
import { serveWatch } from './watch.js';
import { eventWire, nodeWire, sandboxWire, snapshotViewWire } from './wire.js';

const P = '/admin/v1';
const STATES: readonly SandboxState[] = ['creating', 'running', 'pausing', 'paused', 'resuming', 'destroying', 'gone', 'error', 'lost'];

const stringMap = z.record(z.string(), z.string());
const EgressBody = z
  .object({ allowInternet: z.boolean().optional(), allowOut: z.array(z.string()).optional(), denyOut: z.array(z.string()).optional() })
  .strict();
const CreateBody = z
  .object({
    templateID: z.string().min(1).optional(),
    cpus: z.number().positive().optional(),
    memoryMiB: z.number().int().min(16).optional(),
    diskGiB: z.number().positive().optional(),
    timeoutSec: z.number().int().min(1).optional(),
    nodeID: z.string().min(1).optional(),
    runtime: z.enum(['ns', 'microvm', 'sim']).optional(),
    metadata: stringMap.optional(),
    envVars: stringMap.optional(),
    egress: EgressBody.optional(),
    lifecycle: z
      .object({ onTimeout: z.enum(['kill', 'pause']), autoResume: z.boolean() })
      .strict()
      .optional(),
  })
  .strict();
const ExecBody = z
  .object({
    argv: z.array(z.string()).min(1),
    env: stringMap.optional(),
    cwd: z.string().optional(),
    user: z.enum(['root', 'user']).optional(),
    timeoutMs: z.number().int().min(0).optional(),
  })
  .strict();
const PauseBody = z.object({ release: z.boolean().optional() }).strict();
const SnapshotBody = z.object({ name: z.string().optional() }).strict();
const ForkBody = z.object({ count: z.number().int().optional(), timeoutSec: z.number().int().min(1).optional() }).strict();
const DrainBody = z.object({ evict: z.boolean().optional(), deadlineSec: z.number().int().min(0).optional() }).strict();
const SetBody = z.object({ path: z.string().min(1), value: z.unknown() }).strict();

const actor = (req: IncomingMessage & { caller?: Caller }) => req.caller?.keyID;

export function registerAdminRoutes(router: ApiRouter, ctx: ApiContext): void {
  const { cp } = ctx;
  const on = (method: 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE', path: string, h: Handler) =>
    router.on(method, `${P}${path}`, (req, res, params, _store, query) => {
      Promise.resolve(h(req, res, params, query as Record<string, string>)).catch((e: unknown) => sendError(res, e, 'admin', ctx.log));
    });
  const nodeAction = (action: 'cordon' | 'uncordon') => async (req: IncomingMessage, res: ServerResponse, p: Record<string, string | undefined>) =>
    sendJson(res, 200, nodeWire(await cp.nodeAction({ nodeID: p.nodeID!, action, ...opt('actor', actor(req)) })));

  on('GET', '/nodes', async (_req, res) => sendJson(res, 200, (await cp.listNodes()).map(nodeWire)));
  on('GET', '/nodes/:nodeID', async (_req, res, p) => {
    const node = (await cp.listNodes()).find((n) => n.nodeID === p.nodeID);
    if (!node) throw new CubeError('NOT_FOUND', `node ${p.nodeID} not found`);
    sendJson(res, 200, nodeWire(node));
  });
  on('POST', '/nodes/:nodeID/cordon', nodeAction('cordon'));
  on('POST', '/nodes/:nodeID/uncordon', nodeAction('uncordon'));
  on('POST', '/nodes/:nodeID/drain', async (req, res, p) => {
    const b = await body(req, DrainBody);
    sendJson(res, 200, nodeWire(await cp.nodeAction({ nodeID: p.nodeID!, action: 'drain', ...b, ...opt('actor', actor(req)) })));
  });
  on('DELETE', '/nodes/:nodeID', async (req, res, p) => {
    await cp.nodeAction({ nodeID: p.nodeID!, action: 'delete', ...opt('actor', actor(req)) });
    sendNoContent(res);
  });

  on('GET', '/sandboxes', async (_req, res, _p, q) => {
    const state = q.state ? q.state.split(',').filter(Boolean) : undefined;
    const bad = state?.filter((s) => !STATES.includes(s as SandboxState));
    if (bad?.length) throw new CubeError('BAD_REQUEST', `unknown state ${bad.join(', ')} (known: ${STATES.join(', ')})`);
    const list = await cp.listSandboxes({ ...(state ? { state: state as SandboxState[] } : {}), ...opt('nodeID', q.node), ...opt('templateID', q.template) });
    sendJson(res, 200, list.map(sandboxWire));
  });
  on('POST', '/sandboxes', async (req, res) => {
    const answer = new Delivery(res);
    const { signal } = answer;
    const b = await body(req, CreateBody);
    sendJson(
      res,
      201,
      sandboxWire(
        await cp.createSandbox({
          ...b,
          signal,
          answer,
          ...opt('idempotencyKey', clientKeyOf(req.headers[CREATE_KEY_HEADER], b.metadata)),
          ...opt('actor', actor(req)),
        }),
      ),
    );
    answer.sent();
  });
  on('GET', '/sandboxes/:id', async (_req, res, p) => sendJson(res, 200, sandboxWire(await cp.getSandbox(p.id!))));
  on('DELETE', '/sandboxes/:id', async (req, res, p) => {
    // An operator's kill (cubectl, the console): its client did not ask, so a tombstone says who did.
    await cp.destroySandbox(p.id!, actor(req), {
      reason: 'operator_killed',
      message: `killed by an operator (key ${actor(req) ?? 'none'}) through the admin API`,
    });
    sendNoContent(res);
  });
  on('POST', '/sandboxes/:id/pause', async (req, res, p) =>
    sendJson(res, 200, sandboxWire(await cp.pauseSandbox(p.id!, actor(req), await body(req, PauseBody)))),
  );
  on('PUT', '/sandboxes/:id/egress', async (req, res, p) => {
    const b = await body(req, EgressBody);
    sendJson(res, 200, sandboxWire(await cp.audit.run(actor(req), 'sandbox.egress', p.id!, () => cp.setEgress(p.id!, b), { ...b })));
  });
  on('POST', '/sandboxes/:id/resume', async (req, res, p) => sendJson(res, 200, sandboxWire((await cp.resumeSandbox(p.id!, undefined, actor(req))).sandbox)));
  // Live use of every running and paused sandbox, asked of their nodes now (cgroup counters and
  // the sampled quota-group disk use: no file walk). A node that cannot answer (down, older) is
  // left out: its sandboxes show no use rather than failing the console's poll.
  on('GET', '/usage', async (_req, res) => sendJson(res, 200, await liveUsage(ctx)));
  // What the sandbox's processes printed (its node's bounded ring, oldest first), from `since`
  // (ISO 8601, inclusive) on: the console follows it once a second with the last time it holds.
  on('GET', '/sandboxes/:id/output', async (_req, res, p, q) => {
    const since = q.since === undefined ? undefined : Date.parse(q.since);
    if (since !== undefined && !Number.isFinite(since)) throw new CubeError('BAD_REQUEST', `since must be an ISO 8601 time (got ${q.since})`);
    const lines = await (await cp.nodeFor(p.id!)).processOutput(p.id!);
    sendJson(res, 200, since === undefined ? lines : lines.filter((l) => Date.parse(l.at) >= since));
  });
  on('POST', '/sandboxes/:id/exec', async (req, res, p) => {
    const b = await body(req, ExecBody);
    // Recorded as it starts (its output is streamed): an operator running a command in a sandbox.
    await cp.audit.run(actor(req), 'sandbox.exec', p.id!, async () => undefined, {
      argv: b.argv.slice(0, 16).map((a) => a.slice(0, 200)),
      ...(b.user ? { user: b.user } : {}),
    });
    await serveExec(req, res, ctx, p.id!, b);
  });
  // Snapshots (what each keeps: `keeps`) and fork: one entry per fork, {sandbox} or {error: {code, message, status}}.
  on('POST', '/sandboxes/:id/snapshots', async (req, res, p) => {
    const b = await body(req, SnapshotBody);
    sendJson(res, 201, snapshotViewWire(await cp.snapshots.take(p.id!, { ...b, ...(actor(req) ? { actor: actor(req)! } : {}) })));
  });
  on('POST', '/sandboxes/:id/fork', async (req, res, p) => {
    const b = await body(req, ForkBody);
    await cp.keys.assertRoomFor(actor(req), b.count ?? 1);
    const results = await cp.snapshots.fork(p.id!, {
      count: b.count ?? 1,
      ...(b.timeoutSec !== undefined ? { timeoutSec: b.timeoutSec } : {}),
      ...(actor(req) ? { actor: actor(req)! } : {}),
    });
    sendJson(
      res,
      201,
      results.map((r) => ('sandbox' in r ? { sandbox: sandboxWire(r.sandbox) } : { error: errorBody(r.error, 'admin') })),
    );
  });
  on('GET', '/snapshots', async (_req, res, _p, q) =>
    sendJson(
      res,
      200,
      (await cp.snapshots.list({ ...(q.sandbox ? { sandboxID: q.sandbox } : {}), ...(q.name ? { name: q.name } : {}) })).map(snapshotViewWire),
    ),
  );
  on('DELETE', '/snapshots/:ref', async (req, res, p) => {
    await cp.snapshots.remove(p.ref!, actor(req));
    sendNoContent(res);
  });

  on('GET', '/config', async (_req, res) => sendJson(res, 200, cp.config()));
  on('POST', '/config/reload', async (req, res) => sendJson(res, 200, await cp.reloadConfig(actor(req))));
  on('PUT', '/config', async (req, res) => {
    const b = await body(req, SetBody);
    sendJson(res, 200, await cp.setConfig(b.path, b.value, actor(req)));
  });

  on('GET', '/events', async (_req, res, _p, q) => {
    const num = (name: string, v: string | undefined) => {
      if (v === undefined) return undefined;
      const n = Number(v);
      if (!Number.isInteger(n) || n < 0) throw new CubeError('BAD_REQUEST', `${name} must be a non-negative integer (got ${v})`);
      return n;
    };
    sendJson(
      res,
      200,
      (await cp.events({ ...opt('sinceID', num('since', q.since)), ...opt('beforeID', num('before', q.before)), ...opt('limit', num('limit', q.limit)) })).map(
        eventWire,
      ),
    );
  });
  on('GET', '/stats', async (_req, res) => sendJson(res, 200, (await cp.snapshot()).stats));
  registerTemplateRoutes(on, ctx);
  registerKeyRoutes(on, ctx);
  registerVolumeAdminRoutes(on, ctx);
  on('GET', '/watch', (req, res) => serveWatch(req, res, ctx));
}

async function liveUsage(ctx: ApiContext): Promise<SandboxUsage[]> {
  const live = await ctx.cp.listSandboxes({ state: ['running', 'paused'] });
  // One sandbox per node names the node (nodeFor answers the node that holds it).
  const one = new Map<string, string>();
  for (const s of live) if (!one.has(s.nodeID)) one.set(s.nodeID, s.sandboxID);
  const parts = await Promise.all(
    [...one.values()].map(async (id) => {
      try {
        const node = await ctx.cp.nodeFor(id);
        return node.sandboxUsage ? await node.sandboxUsage() : [];
      } catch (e) {
        ctx.log.debug({ err: e, sandboxID: id }, 'usage: node did not answer');
        return [];
      }
    }),
  );
  return parts.flat();
}

/** `{[k]: v}` when v is defined, else `{}` (exactOptionalPropertyTypes-friendly spreading). */
function opt<K extends string, V>(k: K, v: V | undefined): { [P in K]?: V } {
  return (v === undefined ? {} : { [k]: v }) as { [P in K]?: V };
}

// One NDJSON line per ProcessEvent (stdout/stderr data base64); the last line is `end`. A
// client that disconnects early kills the command: admin exec is interactive, not background.
async function serveExec(req: IncomingMessage, res: ServerResponse, ctx: ApiContext, sandboxID: string, b: z.infer<typeof ExecBody>): Promise<void> {
  const node = await ctx.cp.nodeFor(sandboxID);
  const proc = await node.startProcess(sandboxID, {
    argv: b.argv,
    ...opt('env', b.env),
    ...opt('cwd', b.cwd),
    ...opt('user', b.user),
    ...opt('timeoutMs', b.timeoutMs),
  });
  res.writeHead(200, { 'content-type': 'application/x-ndjson', 'cache-control': 'no-cache' });
  let ended = false;
  res.on('close', () => {
    // The client left: its command goes too. A process already gone or a node that cannot be
    // reached has nobody left to tell (the command's own timeout ends it then).
    if (!ended) node.signalProcess(sandboxID, proc.pid, 'SIGKILL').catch(() => {});
  });
  for await (const ev of proc.events) {
    if (ev.type === 'end') ended = true;
    const line = ev.type === 'stdout' || ev.type === 'stderr' || ev.type === 'pty' ? { type: ev.type, data: ev.data.toString('base64') } : ev;
    await writeWaiting(res, `${JSON.stringify(line)}\n`);
  }
  res.end();
}
