// The E2B template API: list/get/delete with real dates, aliases, tags, and the build flow the
// `e2b` SDK's Template.build() drives (POST /v3/templates, GET /templates/{id}/files/{hash} for an
// upload link, a PUT of the files there, POST /v2/templates/{id}/builds/{buildID}, then polling
// GET /templates/{id}/builds/{buildID}/status with logsOffset). A template's E2B id is its NAME;
// its tags are NAME:TAG records of the node's template store (`latest` is listed as NAME).
// Upload links are signed (HMAC of the hash, the template and an expiry): the SDK sends no API key
// with the PUT, so that route is served before key auth (uploadRoute). On a control replica the
// builds run on a compute node (templates/cluster.ts): the same routes, the
// uploads forwarded to the node of the template's newest build, the links signed with a key every
// replica shares.
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import { statSync } from 'node:fs';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { z } from 'zod';
import { CubeError } from '../../errors.js';
import type { Readable } from 'node:stream';
import type { BuildRecord, TemplateBuilder } from '../../templates/build/build.js';
import { parseTemplateRef, type TemplateRecord, type TemplateStore } from '../../templates/store.js';
import type { BuildRequest } from '../../templates/cluster.js';
import type { ApiContext, ApiRouter, Caller } from '../context.js';
import { readJson, sendError, sendJson, sendNoContent } from '../../http.js';
import { ENVD_VERSION, parseBody } from './wire.js';
import { HOST_TEMPLATE, sameTemplate } from '../../model/template.js';

type Req = IncomingMessage & { caller?: Caller };
type Route = (req: Req, res: ServerResponse, p: Record<string, string>, query: URLSearchParams) => Promise<void>;

const UPLOAD_PREFIX = '/upload/template-files/';
const UPLOAD_TTL_MS = 60 * 60_000;

const RequestBuildSchema = z.looseObject({
  name: z.string().min(1).optional(),
  alias: z.string().min(1).optional(),
  tags: z.array(z.string().min(1)).max(32).optional(),
  cpuCount: z.number().int().min(1).optional(),
  memoryMB: z.number().int().min(128).optional(),
});
const AssignTagsSchema = z.looseObject({ target: z.string().min(1), tags: z.array(z.string().min(1)).min(1).max(32) });
const RemoveTagsSchema = z.looseObject({ name: z.string().min(1), tags: z.array(z.string().min(1)).min(1).max(32) });

/** Builds as the routes drive them: this daemon's builder (role all) or a control replica's, handing them to nodes. */
interface Builds {
  request(o: BuildRequest): Promise<BuildRecord>;
  /** `owner`: the key starting it, whose uploads its COPY steps take. */
  start(templateID: string, buildID: string, body: unknown, owner: string | undefined): Promise<unknown>;
  get(templateID: string, buildID: string): Promise<BuildRecord>;
  list(templateID: string): Promise<BuildRecord[]>;
  /** Uploads are each key's own (`owner`): TemplateBuilder.uploadsOf. */
  hasFiles(templateID: string, hash: string, owner: string | undefined): Promise<boolean>;
  putFiles(templateID: string, hash: string, body: Readable, owner: string | undefined): Promise<void>;
}

function localBuilds(b: TemplateBuilder): Builds {
  return {
    request: async (o) => b.request(o),
    start: (t, id, body, owner) => b.start(t, id, body, owner),
    get: async (t, id) => b.get(t, id),
    list: async (t) => b.list(t),
    hasFiles: async (_t, hash, owner) => b.hasFiles(hash, owner),
    putFiles: (_t, hash, body, owner) => b.putFiles(hash, body, owner),
  };
}

/** The E2B template routes and the pre-auth upload route that goes with them (one signing key). */
export function e2bTemplateRoutes(ctx: ApiContext): {
  register(router: ApiRouter): void;
  uploadRoute: { prefix: string; handle: (req: IncomingMessage, res: ServerResponse) => void };
} {
  const key = ctx.clusterTemplates?.linkKey ?? randomBytes(32);
  // The link is the asking key's: what is PUT there is kept among that key's uploads.
  const sign = (hash: string, templateID: string, owner: string, exp: number) =>
    createHmac('sha256', key).update(`${hash}.${templateID}.${owner}.${exp}`).digest('hex');
  const startedAt = new Date().toISOString();
  const store = (): TemplateStore => {
    if (!ctx.templates)
      throw new CubeError('BAD_REQUEST', 'this daemon keeps no template store (role all on the ns runtime does): templates are managed there');
    return ctx.templates;
  };
  const local = ctx.builds ? localBuilds(ctx.builds) : undefined;
  const builder = (): Builds => {
    const b = local ?? ctx.clusterTemplates;
    if (!b)
      throw new CubeError(
        'BAD_REQUEST',
        'this daemon builds no templates (role all on the ns runtime does, and a control replica hands them to its compute nodes)',
      );
    return b;
  };
  const records = async (): Promise<TemplateRecord[]> =>
    ctx.templates ? ctx.templates.listRecords() : ctx.clusterTemplates ? ctx.clusterTemplates.records() : [];
  /** Removes NAME:TAG: from the store here, else (a control replica) from the cluster's nodes. */
  const removeRef = async (ref: string): Promise<void> => {
    if (!ctx.templates && ctx.clusterTemplates) {
      await ctx.clusterTemplates.remove(ref);
      return;
    }
    const live = (await ctx.cp.listSandboxes()).filter((x) => x.state !== 'gone');
    await store().remove(ref, async (rec) => live.filter((x) => sameTemplate(x.templateID, rec.ref)).map((x) => x.sandboxID));
  };
  /** When the host template appeared (its generated rootfs), else when this daemon started. */
  const hostCreated = (): string => {
    const st = ctx.templates ? statSync(ctx.templates.hostRootfs(), { throwIfNoEntry: false }) : undefined;
    return st ? st.mtime.toISOString() : startedAt;
  };

  const templateJson = (id: string, recs: TemplateRecord[], nodes: string[]): Record<string, unknown> => {
    const cfg = ctx.config().sandbox;
    const spec = cfg.default_spec;
    const newest = recs.reduce<TemplateRecord | undefined>((a, r) => (!a || r.created > a.created ? r : a), undefined);
    const oldest = recs.reduce<TemplateRecord | undefined>((a, r) => (!a || r.created < a.created ? r : a), undefined);
    const builds = ctx.builds?.list(id) ?? [];
    const aliases = id === cfg.default_template ? [id, 'base'] : [id];
    return {
      templateID: id,
      buildID: newest?.buildID ?? builds.find((b) => b.status === 'ready')?.buildID ?? newest?.digest ?? id,
      aliases,
      names: aliases,
      public: true,
      cpuCount: spec.cpus,
      memoryMB: spec.memory_mib,
      diskSizeMB: Math.round(spec.disk_gib * 1024),
      envdVersion: ENVD_VERSION,
      buildStatus: 'ready',
      buildCount: Math.max(builds.length, recs.some((r) => r.source === 'build') ? 1 : 0),
      createdAt: oldest?.created ?? (id === HOST_TEMPLATE ? hostCreated() : startedAt),
      updatedAt: newest?.created ?? (id === HOST_TEMPLATE ? hostCreated() : startedAt),
      createdBy: null,
      lastSpawnedAt: null,
      spawnCount: 0,
      nodes,
    };
  };

  /** Records of template `id` (NAME: every tag; NAME:TAG: that one). */
  const recordsOf = async (id: string): Promise<TemplateRecord[]> => {
    const all = await records();
    if (id.includes(':')) {
      const ref = parseTemplateRef(id).ref;
      return all.filter((r) => r.ref === ref);
    }
    return all.filter((r) => r.name === id);
  };
  const known = async (id: string): Promise<TemplateRecord[]> => {
    const recs = await recordsOf(id);
    const resolved = id === 'base' ? ctx.config().sandbox.default_template : id;
    if (!recs.length && resolved !== HOST_TEMPLATE) throw new CubeError('NOT_FOUND', `template '${id}' not found`);
    return recs;
  };

  const routes: [string, string, Route][] = [
    [
      'GET',
      '/templates',
      async (_req, res) => {
        const listed = await ctx.cp.templates();
        const recs = await records();
        // One E2B template per NAME: its tags are records of it.
        const byName = new Map<string, { nodes: Set<string>; recs: TemplateRecord[] }>();
        for (const t of listed) {
          const name = t.templateID.split(':', 1)[0]!;
          const e = byName.get(name) ?? { nodes: new Set(), recs: recs.filter((r) => r.name === name) };
          for (const n of t.nodes) e.nodes.add(n);
          byName.set(name, e);
        }
        sendJson(
          res,
          200,
          [...byName].map(([name, e]) => templateJson(name, e.recs, [...e.nodes])),
        );
      },
    ],
    [
      'GET',
      '/templates/:id',
      async (_req, res, p) => {
        const recs = await known(p.id!);
        const builds = local || ctx.clusterTemplates ? await builder().list(p.id!.split(':', 1)[0]!) : [];
        const t = templateJson(p.id!.split(':', 1)[0]!, recs, []);
        sendJson(res, 200, {
          templateID: t.templateID,
          aliases: t.aliases,
          names: t.names,
          public: true,
          createdAt: t.createdAt,
          updatedAt: t.updatedAt,
          lastSpawnedAt: null,
          spawnCount: 0,
          builds: builds.map((b) => buildJson(b, ctx)),
        });
      },
    ],
    [
      'DELETE',
      '/templates/:id',
      async (req, res, p) => {
        // The SDK deletes a snapshot as a template (E2B snapshots are templates there): a snapshot
        // answering to the id goes first, then the template of that name.
        const snap = await ctx.cp.snapshots.get(p.id!).catch((err: unknown) => {
          if (err instanceof CubeError && err.kind === 'NOT_FOUND') return undefined;
          throw err;
        });
        if (snap) {
          await ctx.cp.snapshots.remove(snap.snapshotID, req.caller?.keyID);
          return sendNoContent(res);
        }
        const recs = await known(p.id!).catch((err: unknown) => {
          if (err instanceof CubeError && err.kind === 'NOT_FOUND') throw new CubeError('NOT_FOUND', `snapshot or template '${p.id}' not found`);
          throw err;
        });
        if (!recs.length) throw new CubeError('CONFLICT', `template '${p.id}' is built in and cannot be deleted`);
        for (const r of recs) await removeRef(r.ref);
        sendNoContent(res);
      },
    ],
    [
      'GET',
      '/templates/aliases/:alias',
      async (_req, res, p) => {
        await known(p.alias!);
        sendJson(res, 200, { templateID: p.alias!.split(':', 1)[0], public: true });
      },
    ],
    [
      'GET',
      '/templates/:id/tags',
      async (_req, res, p) => {
        const recs = await known(p.id!);
        sendJson(
          res,
          200,
          recs.map((r) => ({ tag: r.tag, buildID: r.buildID ?? r.digest, createdAt: r.created })),
        );
      },
    ],
    [
      'POST',
      '/templates/tags',
      async (req, res) => {
        const b = parseBody(AssignTagsSchema, await readJson(req), 'tags body');
        // A control replica tags it on every live node holding it.
        const { from, tags } = !ctx.templates && ctx.clusterTemplates ? await ctx.clusterTemplates.tag(b.target, b.tags) : await store().tag(b.target, b.tags);
        sendJson(res, 201, { buildID: from.buildID ?? from.digest, tags });
      },
    ],
    [
      'DELETE',
      '/templates/tags',
      async (req, res) => {
        const b = parseBody(RemoveTagsSchema, await readJson(req), 'tags body');
        for (const tag of b.tags) await removeRef(parseTemplateRef(`${b.name.split(':', 1)[0]}:${tag}`).ref);
        sendNoContent(res);
      },
    ],
    [
      'POST',
      '/v3/templates',
      async (req, res) => {
        const b = parseBody(RequestBuildSchema, await readJson(req), 'template build request');
        const name = b.name ?? b.alias;
        if (!name) throw new CubeError('BAD_REQUEST', 'name is required (NAME or NAME:TAG)');
        const build = await builder().request({
          name,
          ...(b.tags ? { tags: b.tags } : {}),
          ...(b.cpuCount ? { cpuCount: b.cpuCount } : {}),
          ...(b.memoryMB ? { memoryMB: b.memoryMB } : {}),
        });
        sendJson(res, 202, {
          templateID: build.templateID,
          buildID: build.buildID,
          aliases: [build.templateID],
          names: [build.templateID],
          tags: build.refs.map((r) => r.split(':')[1]),
          public: true,
        });
      },
    ],
    [
      'GET',
      '/templates/:id/files/:hash',
      async (req, res, p) => {
        const hash = p.hash!;
        const tid = p.id!.split(':', 1)[0]!;
        const owner = req.caller?.keyID ?? '';
        if (await builder().hasFiles(tid, hash, owner || undefined)) return sendJson(res, 200, { present: true });
        const exp = Date.now() + UPLOAD_TTL_MS;
        const proto = (req.headers['x-forwarded-proto'] as string | undefined) ?? 'http';
        const host = req.headers.host ?? '127.0.0.1';
        sendJson(res, 201, {
          present: false,
          url: `${proto}://${host}${UPLOAD_PREFIX}${hash}?t=${encodeURIComponent(tid)}&o=${encodeURIComponent(owner)}&exp=${exp}&sig=${sign(hash, tid, owner, exp)}`,
        });
      },
    ],
    [
      'POST',
      '/v2/templates/:id/builds/:buildID',
      async (req, res, p) => {
        await builder().start(p.id!, p.buildID!, await readJson(req, 4 << 20), req.caller?.keyID);
        sendNoContent(res, 202);
      },
    ],
    [
      'GET',
      '/templates/:id/builds/:buildID/status',
      async (_req, res, p, q) => {
        const b = await builder().get(p.id!, p.buildID!);
        const offset = Number(q.get('logsOffset') ?? 0);
        if (!Number.isInteger(offset) || offset < 0) throw new CubeError('BAD_REQUEST', `logsOffset must be a whole number (got ${q.get('logsOffset')})`);
        sendJson(res, 200, {
          templateID: b.templateID,
          buildID: b.buildID,
          status: b.status,
          logEntries: b.logs.slice(offset),
          logs: [],
          ...(b.reason ? { reason: b.reason } : {}),
        });
      },
    ],
    [
      'GET',
      '/templates/:id/builds/:buildID/logs',
      async (_req, res, p) => {
        sendJson(res, 200, { logs: (await builder().get(p.id!, p.buildID!)).logs });
      },
    ],
  ];

  const uploadRoute = {
    prefix: UPLOAD_PREFIX,
    handle: (req: IncomingMessage, res: ServerResponse): void => {
      const run = async () => {
        const url = new URL(req.url ?? '/', 'http://x');
        const hash = url.pathname.slice(UPLOAD_PREFIX.length);
        const tid = url.searchParams.get('t') ?? '';
        const owner = url.searchParams.get('o') ?? '';
        const exp = Number(url.searchParams.get('exp'));
        const sig = Buffer.from(url.searchParams.get('sig') ?? '', 'hex');
        const want = Buffer.from(sign(hash, tid, owner, exp), 'hex');
        if (req.method !== 'PUT') throw new CubeError('BAD_REQUEST', 'upload with PUT');
        if (sig.length !== want.length || !timingSafeEqual(sig, want) || !(exp > Date.now()))
          throw new CubeError('UNAUTHORIZED', 'upload link invalid or expired: ask GET /templates/{id}/files/{hash} for a new one');
        await builder().putFiles(tid, hash, req, owner || undefined);
        sendNoContent(res, 201);
      };
      run().catch((e: unknown) => sendError(res, e, 'e2b', ctx.log));
    },
  };

  return {
    register(router) {
      for (const [method, path, fn] of routes) {
        router.on(method as 'GET', path, (req, res, params) => {
          const query = new URL(req.url ?? '/', 'http://x').searchParams;
          fn(req as Req, res, params as Record<string, string>, query).catch((e: unknown) => sendError(res, e, 'e2b', ctx.log));
        });
      }
    },
    uploadRoute,
  };
}

function buildJson(b: BuildRecord, ctx: ApiContext): Record<string, unknown> {
  const spec = ctx.config().sandbox.default_spec;
  return {
    buildID: b.buildID,
    status: b.status,
    cpuCount: b.cpuCount,
    memoryMB: b.memoryMB,
    diskSizeMB: Math.round(spec.disk_gib * 1024),
    envdVersion: ENVD_VERSION,
    createdAt: b.createdAt,
    updatedAt: b.updatedAt,
    ...(b.finishedAt ? { finishedAt: b.finishedAt } : {}),
  };
}
