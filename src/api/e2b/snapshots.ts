// E2B snapshots and fork (createSnapshot, listSnapshots, deleteSnapshot, Sandbox.create(snapshotId),
// fork). What a snapshot keeps depends on the runtime that took it, and every answer says so:
// `keeps: "filesystem"` for ns (the writable layer; processes and memory are not kept, a sandbox
// made from it starts its template's init and start command afresh).
import { z } from 'zod';
import { CubeError, errorBody, toCubeError } from '../../errors.js';
import type { SandboxRecord, SnapshotRecord } from '../../model/sandbox.js';
import { isoTime } from '../../model/time.js';
import type { ApiContext, Caller } from '../context.js';
import { readJson, sendJson } from '../../http.js';
import { MAX_PAGE, parseBody, sandboxJson } from './wire.js';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { HTTPMethod } from 'find-my-way';

type Route = (
  req: IncomingMessage & { caller?: Caller },
  res: ServerResponse,
  id: string,
  query: URLSearchParams,
  params: Record<string, string | undefined>,
) => Promise<void>;
type On = (method: HTTPMethod, paths: string[], fn: Route) => void;

const SnapshotSchema = z.looseObject({ name: z.string().optional() });
const ForkSchema = z.looseObject({ count: z.number().int().optional(), timeout: z.number().int().min(0).optional() });

/** SnapshotInfo, with what it keeps (an addition the SDK ignores). */
export function snapshotJson(s: SnapshotRecord): Record<string, unknown> {
  return {
    snapshotID: s.snapshotID,
    names: s.names,
    sandboxID: s.sandboxID,
    templateID: s.templateID,
    runtime: s.runtime,
    keeps: s.keeps,
    processesKept: s.keeps !== 'filesystem',
    createdAt: isoTime(s.createdAt),
  };
}

/** One page of snapshots, oldest first; the token is the last id of the page (pure). */
export function snapshotPage(all: SnapshotRecord[], limit: number, nextToken?: string): { items: SnapshotRecord[]; nextToken?: string } {
  const from = nextToken === undefined ? 0 : all.findIndex((s) => s.snapshotID === nextToken) + 1;
  if (nextToken !== undefined && from === 0) throw new CubeError('BAD_REQUEST', `nextToken ${JSON.stringify(nextToken)} is not a snapshot of this list`);
  const items = all.slice(from, from + limit);
  return from + limit < all.length ? { items, nextToken: items[items.length - 1]!.snapshotID } : { items };
}

export function registerSnapshotRoutes(
  on: On,
  ctx: ApiContext,
  fresh: (id: string, req: Parameters<Route>[0]) => Promise<SandboxRecord>,
  domain: () => string,
): void {
  const actor = (req: Parameters<Route>[0]) => req.caller?.keyID;

  // 404 for an unknown sandbox (the SDK's SandboxNotFoundError); a paused sandbox is snapshotted as it is.
  on('POST', ['/sandboxes/:id/snapshots'], async (req, res, id) => {
    const b = parseBody(SnapshotSchema, await readJson(req), 'snapshot body');
    await fresh(id, req);
    const snap = await ctx.cp.snapshots.take(id, { ...(b.name !== undefined ? { name: b.name } : {}), ...(actor(req) ? { actor: actor(req)! } : {}) });
    sendJson(res, 201, snapshotJson(snap));
  });

  on('GET', ['/snapshots'], async (_req, res, _id, query) => {
    const limitRaw = query.get('limit');
    const limit = limitRaw === null || limitRaw === '' ? MAX_PAGE : Number(limitRaw);
    if (!Number.isInteger(limit) || limit < 1 || limit > MAX_PAGE) throw new CubeError('BAD_REQUEST', `limit must be an integer from 1 to ${MAX_PAGE}`);
    const sandboxID = query.get('sandboxID') || undefined;
    const name = query.get('name') || undefined;
    const page = snapshotPage(
      await ctx.cp.snapshots.list({ ...(sandboxID ? { sandboxID } : {}), ...(name ? { name } : {}) }),
      limit,
      query.get('nextToken') || undefined,
    );
    sendJson(res, 200, page.items.map(snapshotJson), page.nextToken ? { 'x-next-token': page.nextToken } : {});
  });

  // One entry per fork: the sandbox, or the error that kept it from starting (code = HTTP status).
  on('POST', ['/sandboxes/:id/fork'], async (req, res, id) => {
    const b = parseBody(ForkSchema, await readJson(req), 'fork body');
    await fresh(id, req);
    await ctx.cp.keys.assertRoomFor(actor(req), b.count ?? 1);
    const results = await ctx.cp.snapshots.fork(id, {
      count: b.count ?? 1,
      ...(b.timeout !== undefined ? { timeoutSec: b.timeout } : {}),
      ...(actor(req) ? { actor: actor(req)! } : {}),
    });
    sendJson(
      res,
      201,
      results.map((r) => ('sandbox' in r ? { sandbox: sandboxJson(r.sandbox, domain()) } : { error: errorBody(toCubeError(r.error), 'e2b') })),
    );
  });
}
