// /admin/v1/keys (API keys: list, create, show, change, remove; the key itself is in the create's
// answer only) and /admin/v1/audit (who did what, newest first). Admin keys only, like every
// /admin/v1 route (server.ts).
import { z } from 'zod';
import { CubeError } from '../../errors.js';
import { KEY_ROLES, QUOTA_NAMES, type KeyView as ModelKeyView } from '../../model/api-key.js';
import { isoTime } from '../../model/time.js';
import { sendJson, sendNoContent } from '../../http.js';
import { body } from './body.js';
import type { ApiContext, Handler } from '../context.js';
import type { KeyView } from '../types.js';

type On = (method: 'GET' | 'POST' | 'PATCH' | 'DELETE', path: string, h: Handler) => void;

const quota = z.number().min(0);
const Quotas = z
  .object(Object.fromEntries(QUOTA_NAMES.map((q) => [q, quota.optional()])) as Record<(typeof QUOTA_NAMES)[number], z.ZodOptional<typeof quota>>)
  .strict();
const QuotaPatch = z
  .object(
    Object.fromEntries(QUOTA_NAMES.map((q) => [q, quota.nullable().optional()])) as Record<
      (typeof QUOTA_NAMES)[number],
      z.ZodOptional<z.ZodNullable<typeof quota>>
    >,
  )
  .strict();
const CreateBody = z.object({ name: z.string(), role: z.enum(KEY_ROLES).default('user'), quotas: Quotas.optional() }).strict();
const PatchBody = z.object({ name: z.string().optional(), role: z.enum(KEY_ROLES).optional(), quotas: QuotaPatch.optional() }).strict();

export function keyWire(k: ModelKeyView): KeyView {
  return { ...k, createdAt: isoTime(k.createdAt) };
}

/** Strips undefined members (exactOptionalPropertyTypes: zod's optional fields come back present and undefined). */
function defined<T extends object>(o: T): { [K in keyof T]: Exclude<T[K], undefined> } {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)) as { [K in keyof T]: Exclude<T[K], undefined> };
}

export function registerKeyRoutes(on: On, ctx: ApiContext): void {
  const { keys } = ctx.cp;
  on('GET', '/keys', async (_req, res) => sendJson(res, 200, (await keys.list()).map(keyWire)));
  on('POST', '/keys', async (req, res) => {
    const b = await body(req, CreateBody);
    const { key, record } = await keys.create({ name: b.name, role: b.role, ...(b.quotas ? { quotas: defined(b.quotas) } : {}) }, req.caller?.keyID);
    sendJson(res, 201, { ...keyWire(record), key });
  });
  on('GET', '/keys/:ref', async (_req, res, p) => sendJson(res, 200, keyWire(await keys.get(p.ref!))));
  on('PATCH', '/keys/:ref', async (req, res, p) => {
    const b = await body(req, PatchBody);
    sendJson(res, 200, keyWire(await keys.update(p.ref!, defined({ ...b, ...(b.quotas ? { quotas: defined(b.quotas) } : {}) }), req.caller?.keyID)));
  });
  on('DELETE', '/keys/:ref', async (req, res, p) => {
    await keys.remove(p.ref!, req.caller?.keyID);
    sendNoContent(res);
  });
  on('GET', '/audit', async (_req, res, _p, q) => {
    const limit = q.limit === undefined ? 100 : Number(q.limit);
    if (!Number.isInteger(limit) || limit < 1 || limit > 10_000)
      throw new CubeError('BAD_REQUEST', `limit must be a whole number from 1 to 10000 (got ${q.limit})`);
    sendJson(res, 200, await ctx.cp.audit.list({ limit, ...(q.actor ? { actor: q.actor } : {}) }));
  });
}
