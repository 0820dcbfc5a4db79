// E2B's lifecycle events API and webhooks, as E2B documents them: GET /events/sandboxes[/{id}]
// with offset, limit (1-100, default 10), orderAsc (default false, newest first) and types (given
// any number of times), events kept 7 days; /events/webhooks registered with name, url, enabled,
// events and signatureSecret (never answered back). An API key sees its own sandboxes' events and
// its own webhooks. The `killed` event's eventData carries kill_reason (`request`, or the death's
// reason with cube_code and message: src/model/death.ts).
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { HTTPMethod } from 'find-my-way';
import { z } from 'zod';
import { CubeError } from '../../errors.js';
import { isLifecycleType, LIFECYCLE_TYPES, lifecycleWire, type LifecycleType, type Webhook } from '../../model/lifecycle.js';
import { isoTime } from '../../model/time.js';
import type { ApiContext } from '../context.js';
import { readJson, sendJson } from '../../http.js';
import { parseBody } from './wire.js';

type Route = (
  req: IncomingMessage & { caller?: { keyID?: string } },
  res: ServerResponse,
  id: string,
  query: URLSearchParams,
  params: Record<string, string | undefined>,
) => Promise<void>;
type On = (method: HTTPMethod, paths: string[], fn: Route) => void;

const MAX_LIMIT = 100;

const httpURL = z.string().refine((u) => URL.canParse(u) && /^https?:$/.test(new URL(u).protocol), 'an http or https URL');
const eventTypes = z.array(z.enum(LIFECYCLE_TYPES)).min(1).max(LIFECYCLE_TYPES.length);
const WebhookCreate = z.strictObject({
  name: z.string().min(1).max(200),
  url: httpURL,
  enabled: z.boolean().default(true),
  events: eventTypes,
  signatureSecret: z.string().min(1).max(1000),
});
const WebhookUpdate = z.strictObject({
  name: z.string().min(1).max(200).optional(),
  url: httpURL.optional(),
  enabled: z.boolean().optional(),
  events: eventTypes.optional(),
  signatureSecret: z.string().min(1).max(1000).optional(),
});

/** A registered webhook as E2B answers it (its secret stays here). */
export function webhookJson(w: Webhook): Record<string, unknown> {
  return { id: w.id, teamID: w.owner ?? null, name: w.name, createdAt: isoTime(w.createdAt), enabled: w.enabled, url: w.url, events: w.events };
}

/** The events query (pure): 400 for what E2B refuses. */
export function eventsQuery(q: URLSearchParams): { offset: number; limit: number; orderAsc: boolean; types: LifecycleType[] } {
  const int = (name: string, dflt: number, min: number, max: number): number => {
    const raw = q.get(name);
    if (raw === null || raw === '') return dflt;
    const n = Number(raw);
    if (!Number.isInteger(n) || n < min || n > max) throw new CubeError('BAD_REQUEST', `${name} must be an integer from ${min} to ${max}`);
    return n;
  };
  const asc = q.get('orderAsc');
  if (asc !== null && asc !== '' && asc !== 'true' && asc !== 'false') throw new CubeError('BAD_REQUEST', 'orderAsc must be true or false');
  const types = q
    .getAll('types')
    .flatMap((t) => t.split(','))
    .filter(Boolean);
  const bad = types.filter((t) => !isLifecycleType(t));
  if (bad.length > 0) throw new CubeError('BAD_REQUEST', `unknown event type ${bad.join(', ')} (known: ${LIFECYCLE_TYPES.join(', ')})`);
  return {
    offset: int('offset', 0, 0, Number.MAX_SAFE_INTEGER),
    limit: int('limit', 10, 1, MAX_LIMIT),
    orderAsc: asc === 'true',
    types: types as LifecycleType[],
  };
}

export function registerLifecycleRoutes(on: On, ctx: ApiContext): void {
  const owner = (req: Parameters<Route>[0]) => req.caller?.keyID;
  const lc = () => ctx.cp.lifecycle;

  on('GET', ['/events/sandboxes'], async (req, res, _id, query) => {
    const q = eventsQuery(query);
    sendJson(res, 200, (await lc().events({ ...q, ...(owner(req) !== undefined ? { owner: owner(req)! } : {}) })).map(lifecycleWire));
  });
  on('GET', ['/events/sandboxes/:id'], async (req, res, id, query) => {
    const q = eventsQuery(query);
    sendJson(res, 200, (await lc().events({ ...q, sandboxID: id, ...(owner(req) !== undefined ? { owner: owner(req)! } : {}) })).map(lifecycleWire));
  });

  on('POST', ['/events/webhooks'], async (req, res) => {
    const b = parseBody(WebhookCreate, await readJson(req), 'webhook');
    sendJson(res, 201, webhookJson(await lc().createWebhook(owner(req), b)));
  });
  on('GET', ['/events/webhooks'], async (req, res) => sendJson(res, 200, (await lc().webhooks(owner(req))).map(webhookJson)));
  on('GET', ['/events/webhooks/:webhookID'], async (req, res, _id, _q, p) => sendJson(res, 200, webhookJson(await lc().webhook(owner(req), p.webhookID!))));
  on('PATCH', ['/events/webhooks/:webhookID'], async (req, res, _id, _q, p) => {
    const b = parseBody(WebhookUpdate, await readJson(req), 'webhook update');
    const patch = Object.fromEntries(Object.entries(b as Record<string, unknown>).filter(([, v]) => v !== undefined));
    sendJson(res, 200, webhookJson(await lc().updateWebhook(owner(req), p.webhookID!, patch)));
  });
  on('DELETE', ['/events/webhooks/:webhookID'], async (req, res, _id, _q, p) => {
    await lc().deleteWebhook(owner(req), p.webhookID!);
    sendJson(res, 200, {});
  });
}
