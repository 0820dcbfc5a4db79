// /admin/v1/templates: list, inspect, import (an image archive streamed as the request body,
// spooled under the data dir, then unpacked into the layer store) and rm (refused while a
// sandbox or a template built from it uses it). On a control replica, import goes on to a node
// and rm is checked across the cluster, then carried out on every live node holding the template.
// pull: an image from a registry (layers/pull.ts), resolved to its digest before the answer
// starts (so an unknown image, refused credentials or a registry down are plain 404 / 403 / 503
// answers), then NDJSON: {progress} lines while skopeo copies and the layers unpack, and one
// {record} or {error} line at the end. The credentials in the body go to skopeo in an auth file,
// never to a log, the audit trail or the record.
import { CubeError, errorBody, toCubeError } from '../../errors.js';
import { importUpload } from '../../templates/layers/import.js';
import { pullTemplate, resolveImage } from '../../templates/layers/pull.js';
import { readJson } from '../../http.js';
import { parseTemplateRef, type TemplateRecord, type TemplateStore } from '../../templates/store.js';
import { templateRuntime, type TemplateConfig } from '../../runtime/types.js';
import type { ApiContext, Handler } from '../context.js';
import { sendJson } from '../../http.js';
import { sameTemplate } from '../../model/template.js';

type On = (method: 'GET' | 'POST' | 'PUT' | 'DELETE', path: string, h: Handler) => void;

/** One row of GET /admin/v1/templates: the nodes holding it and, where this daemon stores it, its record. */
export interface TemplateListing {
  templateID: string;
  nodes: string[];
  record?: TemplateRecord;
}

export function registerTemplateRoutes(on: On, ctx: ApiContext): void {
  const store = (): TemplateStore => {
    if (!ctx.templates)
      throw new CubeError('BAD_REQUEST', 'this daemon keeps no template store (role all on the ns runtime does): templates are managed there');
    return ctx.templates;
  };

  on('GET', '/templates', async (_req, res) => {
    const records = ctx.templates ? await ctx.templates.listRecords() : [];
    const byName = new Map(records.map((r) => [r.tag === 'latest' ? r.name : r.ref, r]));
    const list: TemplateListing[] = (await ctx.cp.templates()).map((t) => {
      const record = byName.get(t.templateID);
      return { ...t, ...(record ? { record } : {}) };
    });
    sendJson(res, 200, list);
  });
  on('GET', '/templates/:name', async (_req, res, p) =>
    sendJson(res, 200, !ctx.templates && ctx.relay ? (await ctx.relay.template(p.name!)).record : await store().get(p.name!)),
  );
  on('DELETE', '/templates/:name', async (req, res, p) => {
    const removed = await ctx.cp.audit.run(req.caller?.keyID, 'template.rm', p.name!, async () => {
      // A control replica: checked against the whole cluster, removed from every live node holding it.
      if (!ctx.templates && ctx.clusterTemplates) return ctx.clusterTemplates.remove(p.name!);
      return store().remove(p.name!, async (rec) => {
        const live = await ctx.cp.listSandboxes();
        return live.filter((s) => s.state !== 'gone' && sameTemplate(s.templateID, rec.ref)).map((s) => s.sandboxID);
      });
    });
    sendJson(res, 200, removed);
  });
  on('POST', '/templates/import', async (req, res, _p, q) => {
    if (!q.name) throw new CubeError('BAD_REQUEST', 'name is required (NAME[:TAG])');
    const ref = parseTemplateRef(q.name).ref;
    const config = configOverrides(q);
    const t0 = performance.now();
    // A control replica keeps no store: the archive goes on to a node (?node=, else any live one), whose layers every node can then fetch.
    const rec = await ctx.cp.audit.run(req.caller?.keyID, 'template.import', ref, () =>
      !ctx.templates && ctx.relay ? ctx.relay.importOn(q.node, req, { ref, config }) : importUpload(store(), req, { ref, config }),
    );
    ctx.log.info({ template: rec.ref, digest: rec.digest, layers: rec.layers.length, ms: Math.round(performance.now() - t0) }, 'template imported');
    sendJson(res, 201, rec);
  });
  on('POST', '/templates/pull', async (req, res) => {
    const b = await readJson(req, 64 << 10);
    if (typeof b.image !== 'string' || !b.image) throw new CubeError('BAD_REQUEST', 'image is required (HOST[:PORT]/NAME:TAG or docker://...)');
    if (typeof b.name !== 'string' || !b.name) throw new CubeError('BAD_REQUEST', 'name is required (NAME[:TAG])');
    const ref = parseTemplateRef(b.name).ref;
    const config = configOverrides(stringsOf(b, ['startCmd', 'readyCmd', 'readyTimeoutSec', 'workdir', 'user', 'runtime']));
    if ((b.username === undefined) !== (b.password === undefined)) throw new CubeError('BAD_REQUEST', 'username and password go together');
    if (
      b.username !== undefined &&
      (typeof b.username !== 'string' || typeof b.password !== 'string' || !b.username || !b.password || b.username.includes(':'))
    )
      throw new CubeError('BAD_REQUEST', 'username and password must be non-empty strings (no colon in the username)');
    const creds = typeof b.username === 'string' && typeof b.password === 'string' ? { username: b.username, password: b.password } : undefined;
    if (!ctx.templates)
      throw new CubeError(
        'BAD_REQUEST',
        'a control replica pulls no images itself: pull on a node (role all), or build with the E2B SDK fromImage, which runs on a compute node',
      );
    const access = { ...(creds ? { creds } : {}), insecure: ctx.registryInsecure?.() ?? [] };
    const t0 = performance.now();
    await ctx.cp.audit
      .run(req.caller?.keyID, 'template.pull', ref, async () => {
        const image = await resolveImage(store().dataDir, b.image as string, access);
        res.writeHead(200, { 'content-type': 'application/x-ndjson', 'cache-control': 'no-cache' });
        const line = (o: unknown) => res.write(`${JSON.stringify(o)}\n`);
        line({ progress: `${image.ref.canonical} is ${image.digest}` });
        try {
          const rec = await pullTemplate(store(), image, { ...access, ref, config, progress: (p) => line({ progress: p }) });
          ctx.log.info(
            {
              template: rec.ref,
              image: image.ref.canonical,
              digest: image.digest,
              pulled: rec.pulled,
              layers: rec.layers.length,
              ms: Math.round(performance.now() - t0),
            },
            'template pulled',
          );
          line({ record: rec });
          return rec;
        } catch (e) {
          const err = toCubeError(e);
          ctx.log.warn({ template: ref, image: image.ref.canonical, code: err.code, err: err.message }, 'template pull failed');
          line({ error: { ...errorBody(err, 'admin'), ...(err.retryAfter !== undefined ? { retryAfter: err.retryAfter } : {}) } });
          throw err;
        } finally {
          res.end();
        }
      })
      .catch((e: unknown) => {
        if (!res.headersSent) throw e; // answered as an error by the router
      });
  });
}

/** Strings of a JSON body as the query-string options configOverrides reads. */
function stringsOf(b: Record<string, unknown>, keys: readonly string[]): Record<string, string> {
  const out: Record<string, string> = {};
  for (const k of keys) {
    const v = b[k];
    if (v === undefined || v === null) continue;
    if (typeof v !== 'string' && typeof v !== 'number') throw new CubeError('BAD_REQUEST', `${k} must be a string`);
    out[k] = String(v);
  }
  return out;
}

/** Config given with the import (query string): start and ready commands, workdir, user, default runtime. */
function configOverrides(q: Record<string, string>): Partial<TemplateConfig> {
  const out: Partial<TemplateConfig> = {};
  if (q.startCmd) out.startCmd = q.startCmd;
  if (q.readyCmd) out.readyCmd = q.readyCmd;
  if (q.readyTimeoutSec !== undefined) {
    const n = Number(q.readyTimeoutSec);
    if (!Number.isInteger(n) || n < 1 || n > 3600)
      throw new CubeError('BAD_REQUEST', `readyTimeoutSec must be an integer from 1 to 3600 (got ${q.readyTimeoutSec})`);
    out.readyTimeoutSec = n;
  }
  if (q.workdir !== undefined) {
    if (q.workdir !== '' && !q.workdir.startsWith('/')) throw new CubeError('BAD_REQUEST', `workdir must be an absolute path (got ${q.workdir})`);
    out.workdir = q.workdir;
  }
  if (q.user !== undefined) {
    if (q.user !== 'root' && q.user !== 'user') throw new CubeError('BAD_REQUEST', `user must be 'root' or 'user' (got ${q.user})`);
    out.user = q.user;
  }
  if (q.runtime !== undefined) out.runtime = templateRuntime(q.runtime);
  return out;
}
