// E2B volumes: the team API (POST/GET /volumes, GET/DELETE /volumes/{volumeID}, by API key) and
// the volume content API (/volumecontent/{volumeID}/dir|path|file, by the volume's own token,
// which Volume.create and getInfo hand out; the SDK sends it as `Authorization: Bearer`, to
// E2B_VOLUME_API_URL or its apiUrl option, which point at this server). The content API is
// served before API-key auth, like template uploads (server.ts), and each request names its
// volume, whose token alone opens it.
import type { IncomingMessage, ServerResponse } from 'node:http';
import { pipeline } from 'node:stream/promises';
import type { HTTPMethod } from 'find-my-way';
import { z } from 'zod';
import { CubeError, isCubeError } from '../../errors.js';
import { readJson, sendError, sendJson, sendNoContent } from '../../http.js';
import { isoTime } from '../../model/time.js';
import type { VolumeRecord } from '../../model/volume.js';
import type { FileStat, VolumeWriteOptions } from '../../runtime/types.js';
import type { ApiContext, Caller } from '../context.js';
import { RateLimiter } from '../rate-limit.js';
import { parseBody } from './wire.js';

type Req = IncomingMessage & { caller?: Caller };
type Route = (req: Req, res: ServerResponse, id: string, query: URLSearchParams, params: Record<string, string | undefined>) => Promise<void>;
type On = (method: HTTPMethod, paths: string[], fn: Route) => void;

/** E2B NewVolume, and our extension: its size limit in GiB (absent: volumes.default_gib). */
const NewVolumeSchema = z.looseObject({ name: z.string(), sizeGiB: z.number().positive().optional() });
const MetadataSchema = z.looseObject({ uid: z.number().int().optional(), gid: z.number().int().optional(), mode: z.number().int().optional() });

export const VOLUME_CONTENT_PREFIX = '/volumecontent/';

/** E2B Volume (list), with what else we know (the SDK reads only the first two). */
export function volumeJson(v: VolumeRecord): Record<string, unknown> {
  return { volumeID: v.volumeID, name: v.name, sizeBytes: v.sizeBytes, nodeID: v.nodeID, createdAt: isoTime(v.createdAt) };
}

/** E2B VolumeAndToken (create, get): no `domain`, so the SDK keeps its own (E2B_VOLUME_API_URL or apiUrl). */
export function volumeAndTokenJson(v: VolumeRecord): Record<string, unknown> {
  return { ...volumeJson(v), token: v.token };
}

/** E2B VolumeEntryStat of a FileStat (paths inside the volume) (pure). */
export function entryJson(st: FileStat): Record<string, unknown> {
  const type = st.type === 'dir' ? 'directory' : st.type === 'other' ? 'unknown' : st.type;
  return {
    name: st.name,
    path: st.path,
    type,
    size: st.size,
    mode: st.mode,
    uid: st.uid,
    gid: st.gid,
    atime: (st.atime ?? st.mtime).toISOString(),
    mtime: st.mtime.toISOString(),
    ctime: (st.ctime ?? st.mtime).toISOString(),
    ...(st.symlinkTarget !== undefined ? { target: st.symlinkTarget } : {}),
  };
}

export function registerVolumeRoutes(on: On, ctx: ApiContext): void {
  const who = (req: Req) => ({ ...(req.caller?.keyID !== undefined ? { keyID: req.caller.keyID } : {}), ...(req.caller ? { role: req.caller.role } : {}) });

  on('POST', ['/volumes'], async (req, res) => {
    const b = parseBody(NewVolumeSchema, await readJson(req), 'volume body');
    const rec = await ctx.cp.volumes.create(b.name, who(req), b.sizeGiB !== undefined ? { sizeGiB: b.sizeGiB } : {});
    sendJson(res, 201, volumeAndTokenJson(rec));
  });

  on('GET', ['/volumes'], async (req, res) => {
    sendJson(res, 200, (await ctx.cp.volumes.list(who(req))).map(volumeJson));
  });

  on('GET', ['/volumes/:volumeID'], async (req, res, _id, _q, params) => {
    // The record alone (no call to its node: Volume.connect must not wait for a node that is down).
    sendJson(res, 200, volumeAndTokenJson(await ctx.cp.volumes.get(params.volumeID ?? '', who(req))));
  });

  on('DELETE', ['/volumes/:volumeID'], async (req, res, _id, _q, params) => {
    await ctx.cp.volumes.remove(params.volumeID ?? '', who(req));
    sendNoContent(res);
  });
}

/** The content API's route, served before API-key auth (its own token). */
export function volumeContentRoute(ctx: ApiContext): { prefix: string; handle: (req: IncomingMessage, res: ServerResponse) => void } {
  // Wrong tokens count against their source like wrong API keys (api.auth_failures_per_sec): past
  // it they are answered 429 instead of 401. A right token is never held back by others' failures
  // from the same address (a NAT): guessing one (192 random bits) is not the risk, a flood is.
  const failures = new RateLimiter(() => ctx.config().api.auth_failures_per_sec);
  const limited = (wait: number) =>
    new CubeError('RATE_LIMITED', `more than ${ctx.config().api.auth_failures_per_sec} failed authentications per second from this address`, {
      retryAfter: wait,
    });
  return {
    prefix: VOLUME_CONTENT_PREFIX,
    handle: (req, res) => {
      serveContent(ctx, req, res).catch((e: unknown) => {
        if (isCubeError(e) && e.kind === 'UNAUTHORIZED') {
          const wait = failures.take(req.socket.remoteAddress ?? '');
          if (wait > 0) return sendError(res, limited(wait), 'e2b', ctx.log);
          res.setHeader('www-authenticate', 'Bearer');
        }
        sendError(res, e, 'e2b', ctx.log);
      });
    },
  };
}

/** A query number (uid, gid, mode, depth) or undefined; 400 when it is not an integer (pure). */
function intParam(q: URLSearchParams, k: string): number | undefined {
  const v = q.get(k);
  if (v === null || v === '') return undefined;
  const n = Number(v);
  if (!Number.isInteger(n)) throw new CubeError('BAD_REQUEST', `${k} must be an integer (got ${JSON.stringify(v)})`);
  return n;
}

function writeOptions(q: URLSearchParams): VolumeWriteOptions {
  const uid = intParam(q, 'uid');
  const gid = intParam(q, 'gid');
  const mode = intParam(q, 'mode');
  return {
    ...(uid !== undefined ? { uid } : {}),
    ...(gid !== undefined ? { gid } : {}),
    ...(mode !== undefined ? { mode } : {}),
    ...(q.get('force') === 'true' ? { force: true } : {}),
  };
}

async function serveContent(ctx: ApiContext, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const url = new URL(req.url ?? '/', 'http://x');
  const m = /^\/volumecontent\/([^/]+)\/(dir|path|file)\/?$/.exec(url.pathname);
  if (!m) throw new CubeError('NOT_FOUND', `no route for ${req.method} ${url.pathname}`);
  const volumeID = decodeURIComponent(m[1]!);
  const kind = m[2]!;
  const auth = req.headers.authorization;
  const token = auth?.startsWith('Bearer ') ? auth.slice(7).trim() : undefined;
  const { host } = await ctx.cp.volumes.content(volumeID, token);
  const q = url.searchParams;
  const path = q.get('path');
  if (path === null || path === '') throw new CubeError('BAD_REQUEST', 'the query parameter path is required');
  const route = `${req.method} ${kind}`;
  switch (route) {
    case 'GET dir': {
      const depth = intParam(q, 'depth') ?? 1;
      if (depth < 1 || depth > 64) throw new CubeError('BAD_REQUEST', `depth ${depth} must be 1-64`);
      return sendJson(res, 200, (await host.listDir(volumeID, path, depth)).map(entryJson));
    }
    case 'POST dir':
      return sendJson(res, 201, entryJson(await host.makeDir(volumeID, path, writeOptions(q))));
    case 'GET path':
      return sendJson(res, 200, entryJson(await host.statPath(volumeID, path)));
    case 'PATCH path': {
      const b = parseBody(MetadataSchema, await readJson(req), 'metadata body');
      const meta = {
        ...(b.uid !== undefined ? { uid: b.uid } : {}),
        ...(b.gid !== undefined ? { gid: b.gid } : {}),
        ...(b.mode !== undefined ? { mode: b.mode } : {}),
      };
      return sendJson(res, 200, entryJson(await host.setMetadata(volumeID, path, meta)));
    }
    case 'DELETE path':
      await host.removePath(volumeID, path);
      return sendNoContent(res);
    case 'GET file': {
      const stream = await host.readFile(volumeID, path);
      res.writeHead(200, { 'content-type': 'application/octet-stream' });
      await pipeline(stream, res);
      return;
    }
    case 'PUT file':
      return sendJson(res, 200, entryJson(await host.writeFile(volumeID, path, req, writeOptions(q))));
    default:
      throw new CubeError('NOT_FOUND', `no route for ${req.method} ${url.pathname}`);
  }
}
