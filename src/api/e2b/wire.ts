// The E2B REST API's JSON shapes and query rules (e2b@2.51.0's OpenAPI types), from and to
// our SandboxRecord. Pure: the routes do the I/O.
import { z } from 'zod';
import { CubeError } from '../../errors.js';
import type { EgressRequest, SandboxRecord } from '../../model/sandbox.js';
import type { SandboxLifecycle, SandboxState } from '../types.js';
import { egressRequest } from '../../network/egress.js';

/** envd protocol level we implement; the SDK gates features on it (0.5.7: octet-stream uploads, 0.6.2: file metadata, 0.6.3: watchDir includeEntry, 0.6.4: watchDir allowNetworkMounts). */
export const ENVD_VERSION = '0.6.4';
/** Deprecated but required by the schema; E2B's infra returns this constant. */
export const CLIENT_ID = '6532622b';
export const MAX_PAGE = 100;

export type E2bState = 'running' | 'paused';

/** E2B knows two states; transitions count as where they are heading or coming from. */
export function e2bState(s: SandboxState): E2bState {
  return s === 'paused' || s === 'pausing' ? 'paused' : 'running';
}

/** Sandboxes on their way out are not listed. */
export function isListed(s: SandboxState): boolean {
  return s !== 'destroying' && s !== 'gone';
}

/** Paths accept the legacy `<id>-<clientID>` form. */
export function sandboxIDParam(raw: string | undefined): string {
  const id = (raw ?? '').split('-')[0]!;
  if (!id) throw new CubeError('BAD_REQUEST', 'sandbox id is required');
  return id;
}

/** `Sandbox` (create/connect answers: the only ones that carry the traffic access token, as E2B's). `domain` only when host routing is configured. */
export function sandboxJson(r: SandboxRecord, domain: string): Record<string, unknown> {
  return { ...sandboxFields(r, domain), trafficAccessToken: r.trafficAccessToken ?? null };
}

function sandboxFields(r: SandboxRecord, domain: string): Record<string, unknown> {
  return {
    sandboxID: r.sandboxID,
    clientID: CLIENT_ID,
    templateID: r.templateID,
    alias: r.templateID,
    envdVersion: ENVD_VERSION,
    envdAccessToken: r.accessToken,
    ...(domain ? { domain } : {}),
  };
}

function common(r: SandboxRecord): Record<string, unknown> {
  return {
    startedAt: new Date(r.startedAt).toISOString(),
    endAt: new Date(r.endAt).toISOString(),
    state: e2bState(r.state),
    cpuCount: r.spec.cpus,
    memoryMB: r.spec.memoryMiB,
    diskSizeMB: Math.round(r.spec.diskGiB * 1024),
    metadata: r.metadata,
    // E2B SandboxVolumeMount: what the sandbox mounts (absent when none, as before volumes).
    ...(r.volumes?.length ? { volumeMounts: r.volumes.map((v) => ({ name: v.name, path: v.path })) } : {}),
  };
}

/** `SandboxDetail` (GET /sandboxes/{id}). */
export function detailJson(r: SandboxRecord, domain: string): Record<string, unknown> {
  const e = r.egress;
  return {
    ...sandboxFields(r, domain),
    ...common(r),
    // Always there, as E2B answers them: what was asked, or what is in force when nothing was
    // (killed at the timeout; the node's egress defaults, of which only its allow_internet_access
    // is not known here; ports public unless the create said otherwise).
    lifecycle: { onTimeout: r.lifecycle?.onTimeout ?? 'kill', autoResume: r.lifecycle?.autoResume ?? false },
    ...(e?.allowInternet !== undefined ? { allowInternetAccess: e.allowInternet } : {}),
    network: { allowOut: e?.allowOut ?? [], denyOut: e?.denyOut ?? [], allowPublicTraffic: r.trafficAccessToken === undefined },
  };
}

/** `ListedSandbox` (GET /v2/sandboxes, GET /sandboxes). */
export function listedJson(r: SandboxRecord): Record<string, unknown> {
  return { sandboxID: r.sandboxID, clientID: CLIENT_ID, templateID: r.templateID, alias: r.templateID, envdVersion: ENVD_VERSION, ...common(r) };
}

// ---- request bodies ----

function issues(e: z.ZodError): string {
  return e.issues.map((i) => `${i.path.length ? i.path.join('.') : 'body'}: ${i.message}`).join('; ');
}

export function parseBody<T>(schema: z.ZodType<T>, raw: unknown, what: string): T {
  const r = schema.safeParse(raw);
  if (!r.success) throw new CubeError('BAD_REQUEST', `invalid ${what}: ${issues(r.error)}`);
  return r.data;
}

const seconds = z.number().int().min(0);
const strings = z.record(z.string(), z.string());

/** NewSandbox (v1, with `secure`) and NewSandboxV2; unknown fields are ignored as E2B's API does. */
export const NewSandboxSchema = z.looseObject({
  templateID: z.string().min(1).optional(),
  timeout: seconds.optional(),
  metadata: strings.optional(),
  envVars: strings.optional(),
  autoPause: z.boolean().optional(),
  autoPauseMemory: z.boolean().optional(),
  autoResume: z.looseObject({ enabled: z.boolean() }).optional(),
  allow_internet_access: z.boolean().optional(),
  secure: z.boolean().optional(),
  network: z
    .looseObject({
      allowOut: z.array(z.string()).optional(),
      denyOut: z.array(z.string()).optional(),
      allowPublicTraffic: z.boolean().optional(),
    })
    .optional(),
  volumeMounts: z
    .array(z.object({ name: z.string(), path: z.string() }))
    .max(16)
    .optional(),
  /** Sandbox.create({ mcp }): E2B's MCP gateway, which we do not run (refuseUnsupported). */
  mcp: z.unknown().optional(),
  /** Sandbox.create({ iam }): E2B's workload-identity tokens, which we do not issue (refuseUnsupported). */
  iam: z.unknown().optional(),
  // Our extension (E2B sizes sandboxes by template): the same names the responses carry.
  cpuCount: z.number().positive().optional(),
  memoryMB: z.number().int().positive().optional(),
});
export type NewSandbox = z.infer<typeof NewSandboxSchema>;

export const TimeoutSchema = z.looseObject({ timeout: seconds });
/** PUT /sandboxes/{id}/network: the whole egress configuration, omitted fields cleared. */
export const NetworkUpdateSchema = z.looseObject({
  allowOut: z.array(z.string()).optional(),
  denyOut: z.array(z.string()).optional(),
  allow_internet_access: z.boolean().optional(),
});
export type NetworkUpdate = z.infer<typeof NetworkUpdateSchema>;
export const RefreshSchema = z.looseObject({ duration: seconds.max(3600).optional() });
/** connect and resume; `memory: false` is the SDK's onResume 'reboot'. */
export const ConnectSchema = z.looseObject({ timeout: seconds.optional(), autoPause: z.boolean().optional(), memory: z.boolean().optional() });
/** pause; `memory: false` is the SDK's pause({ keepMemory: false }). */
export const PauseSchema = z.looseObject({ memory: z.boolean().optional() });

/** pause({ keepMemory: false }) and connect({ onResume: 'reboot' }) ask for a filesystem-only snapshot, which we do not take. */
export function refuseMemoryless(b: { memory?: boolean | undefined }, what: string): void {
  if (b.memory === false)
    throw new CubeError(
      'BAD_REQUEST',
      `${what} without memory is not supported: a paused sandbox keeps its memory (frozen processes), so there is no filesystem-only state to ${what === 'pause' ? 'keep' : 'reboot from'}`,
    );
}

/** network fields we enforce. */
const NETWORK_SUPPORTED = new Set(['allowOut', 'denyOut', 'allowPublicTraffic']);

/** Features the SDK can ask for that we do not have: refused with a clear reason rather than ignored. */
export function refuseUnsupported(b: NewSandbox): void {
  // Both were accepted and ignored until the compatibility matrix's test found them: a sandbox
  // whose env held the literal placeholder, or that ran without the token it asked for.
  if (b.iam !== undefined && b.iam !== null)
    throw new CubeError('BAD_REQUEST', 'IAM tokens (Sandbox.create({ iam }), Secret.iamToken) are not supported: cubed issues no workload-identity tokens');
  const placeholder = Object.entries(b.envVars ?? {}).find(([, v]) => v.includes('${e2b.secrets.'));
  if (placeholder)
    throw new CubeError(
      'BAD_REQUEST',
      `env ${placeholder[0]} holds an E2B secret placeholder (Secret.fill): cubed has no secrets store to fill it from; pass the value itself in envs`,
    );
  if (b.mcp !== undefined && b.mcp !== null)
    throw new CubeError(
      'BAD_REQUEST',
      'the MCP gateway (Sandbox.create({ mcp })) is not supported: cubed runs no mcp-gateway template; start MCP servers in the sandbox with commands.run and reach them with getHost(port)',
    );
  if (b.autoPauseMemory === false)
    throw new CubeError('BAD_REQUEST', 'onTimeout keepMemory false is not supported: a paused sandbox keeps its memory (frozen processes)');
  if (b.autoResume?.enabled && b.autoPause !== true) throw new CubeError('BAD_REQUEST', "autoResume needs autoPause (lifecycle onTimeout 'pause')");
  const net: Record<string, unknown> = b.network ?? {};
  const used = Object.entries(net).filter(([k, v]) => v !== undefined && !NETWORK_SUPPORTED.has(k) && !(Array.isArray(v) && v.length === 0));
  if (used.length > 0)
    throw new CubeError(
      'BAD_REQUEST',
      `network.${used[0]![0]} is not supported: use allow_internet_access, network.allowOut and network.denyOut (IPv4 addresses and CIDRs)`,
    );
}

/** The create's lifecycle: pause instead of kill at the timeout, and resume on traffic. */
export function lifecycleOf(b: NewSandbox): { lifecycle?: SandboxLifecycle } {
  if (b.autoPause !== true) return {};
  return { lifecycle: { onTimeout: 'pause', autoResume: b.autoResume?.enabled === true } };
}

/** A network update's egress request: everything it names, the rest back to the node's defaults. */
export function egressUpdateOf(b: NetworkUpdate): EgressRequest {
  const extra = Object.entries(b).filter(([k, v]) => v != null && !['allowOut', 'denyOut', 'allow_internet_access'].includes(k));
  if (extra.length > 0)
    throw new CubeError('BAD_REQUEST', `network.${extra[0]![0]} is not supported: use allow_internet_access, allowOut and denyOut (IPv4 addresses and CIDRs)`);
  return egressRequest(b.allow_internet_access, b.allowOut, b.denyOut) ?? {};
}

/** The create's egress request: allow_internet_access and network.allowOut/denyOut, when given. */
export function egressOf(b: Pick<NewSandbox, 'allow_internet_access' | 'network'>): { egress?: EgressRequest } {
  const e = egressRequest(b.allow_internet_access, b.network?.allowOut, b.network?.denyOut);
  return e ? { egress: e } : {};
}

// ---- listing ----

export interface ListQuery {
  states: E2bState[];
  metadata: Record<string, string>;
  limit: number;
  nextToken?: string;
  order: 'asc' | 'desc';
  template?: string;
  startedAfter?: number;
}

/**
 * `metadata` arrives encoded twice: the SDK URL-encodes each key and value, joins them with
 * URLSearchParams (which encodes again), and that string is one query value (decoded once
 * by the URL parser). So: unescape the value, split on & and =, unescape each part.
 */
export function parseMetadataFilter(v: string | undefined): Record<string, string> {
  // No prototype: `__proto__=x` is a key like any other (assigned on a plain object it set the
  // prototype, left the filter empty, and the filter matched every sandbox).
  const out: Record<string, string> = Object.create(null) as Record<string, string>;
  if (!v) return out;
  const bad = (what: string): CubeError => new CubeError('BAD_REQUEST', `metadata filter ${JSON.stringify(what)} is not URL-encoded key=value pairs`);
  let joined: string;
  try {
    joined = decodeURIComponent(v);
  } catch {
    throw bad(v);
  }
  for (const pair of joined.split('&')) {
    if (!pair) continue;
    const i = pair.indexOf('=');
    if (i <= 0) throw bad(pair);
    try {
      out[decodeURIComponent(pair.slice(0, i))] = decodeURIComponent(pair.slice(i + 1));
    } catch {
      throw bad(pair);
    }
  }
  return out;
}

export function parseListQuery(q: URLSearchParams, defaultStates: E2bState[]): ListQuery {
  const states = q
    .getAll('state')
    .flatMap((s) => s.split(','))
    .filter(Boolean);
  for (const s of states) if (s !== 'running' && s !== 'paused') throw new CubeError('BAD_REQUEST', `state ${JSON.stringify(s)} is not one of running, paused`);
  const limitRaw = q.get('limit');
  const limit = limitRaw === null || limitRaw === '' ? MAX_PAGE : Number(limitRaw);
  if (!Number.isInteger(limit) || limit < 1 || limit > MAX_PAGE) throw new CubeError('BAD_REQUEST', `limit must be an integer from 1 to ${MAX_PAGE}`);
  const order = q.get('order') ?? 'desc';
  if (order !== 'asc' && order !== 'desc') throw new CubeError('BAD_REQUEST', 'order must be asc or desc');
  const after = q.get('startedAfter');
  const startedAfter = after ? Date.parse(after) : undefined;
  if (startedAfter !== undefined && Number.isNaN(startedAfter)) throw new CubeError('BAD_REQUEST', 'startedAfter must be an ISO 8601 time');
  const nextToken = q.get('nextToken') || undefined;
  const template = q.get('template') || undefined;
  return {
    states: states.length ? (states as E2bState[]) : defaultStates,
    metadata: parseMetadataFilter(q.get('metadata') ?? undefined),
    limit,
    order,
    ...(nextToken ? { nextToken } : {}),
    ...(template ? { template } : {}),
    ...(startedAfter !== undefined ? { startedAfter } : {}),
  };
}

/** A page's sort key: startedAt (epoch ms), sandboxID. */
type Cursor = [startedAt: number, sandboxID: string];

/** The token carries startedAt as ISO 8601, as the tokens of the versions before numeric times did: theirs still work. */
const encodeCursor = (c: Cursor): string => Buffer.from(JSON.stringify([new Date(c[0]).toISOString(), c[1]])).toString('base64url');

function decodeCursor(t: string): Cursor {
  try {
    const c = JSON.parse(Buffer.from(t, 'base64url').toString('utf8')) as unknown;
    if (Array.isArray(c) && c.length === 2 && c.every((x) => typeof x === 'string') && !Number.isNaN(Date.parse(c[0] as string)))
      return [Date.parse(c[0] as string), c[1] as string];
  } catch {
    // fall through to the error below
  }
  throw new CubeError('BAD_REQUEST', 'nextToken is not a token this API returned');
}

/**
 * Filters, orders (startedAt, then id) and cuts one page. The token is the last item's
 * sort key, so pages stay stable while sandboxes come and go.
 */
export function pageOf(records: SandboxRecord[], q: ListQuery): { items: SandboxRecord[]; nextToken?: string } {
  const sign = q.order === 'asc' ? 1 : -1;
  const cmp = (a: Cursor, b: Cursor): number => sign * (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : a[1] < b[1] ? -1 : a[1] > b[1] ? 1 : 0);
  const key = (r: SandboxRecord): Cursor => [r.startedAt, r.sandboxID];
  const after = q.nextToken ? decodeCursor(q.nextToken) : undefined;
  const matching = records
    .filter((r) => isListed(r.state) && q.states.includes(e2bState(r.state)))
    .filter((r) => Object.entries(q.metadata).every(([k, v]) => Object.hasOwn(r.metadata, k) && r.metadata[k] === v))
    .filter((r) => !q.template || r.templateID === q.template)
    .filter((r) => q.startedAfter === undefined || r.startedAt > q.startedAfter)
    .filter((r) => !after || cmp(key(r), after) > 0)
    .sort((a, b) => cmp(key(a), key(b)));
  const items = matching.slice(0, q.limit);
  const last = items[items.length - 1];
  return matching.length > q.limit && last ? { items, nextToken: encodeCursor(key(last)) } : { items };
}
