// A small typed client for the admin API (/admin/v1), used by cubectl and the console.
// Errors: the daemon's JSON `{code, message}` becomes CubeClientError; a daemon that cannot
// be reached at all becomes DaemonUnreachableError. Every answer's strings come back
// terminal-safe (terminal.ts): what a sandbox or another client wrote never acts on the
// operator's terminal, whichever verb or view prints it.
import type {
  AuditView,
  ConfigView,
  EventView,
  KeyQuotas,
  KeyRole,
  KeyView,
  NewKeyView,
  NodeView,
  PauseOptions,
  ReloadResult,
  SandboxState,
  SandboxUsage,
  SandboxView,
  SnapshotView,
  StatsView,
  VolumeView,
  WatchMessage,
} from '../api/types.js';
import type { TemplateListing } from '../api/admin/templates.js';
import type { BuildLogEntry, BuildRecord } from '../templates/build/build.js';
import type { ProcessEvent } from '../cubelet/types.js';
import type { OutputLine } from '../cubelet/output-log.js';
import type { TemplateRecord } from '../templates/store.js';
import type { ExecRequest as RuntimeExecRequest, TemplateRuntime } from '../runtime/types.js';
import { terminalSafe, terminalSafeDeep } from './terminal.js';
import type { CreateSandboxRequest as ControlPlaneCreate, EgressRequest } from '../model/sandbox.js';

export class CubeClientError extends Error {
  /** 1305xx reason from the daemon (0 when the answer carried none). */
  readonly code: number;
  /** HTTP status. */
  readonly status: number;
  /** The answer's `details` (a dead sandbox's tombstone: reason, endedAt, nodeID, by), when it had some. */
  readonly details: Record<string, unknown> | undefined;
  constructor(message: string, code: number, status: number, details?: Record<string, unknown>) {
    super(message);
    this.name = 'CubeClientError';
    this.code = code;
    this.status = status;
    this.details = details;
  }
}

export class DaemonUnreachableError extends Error {
  readonly url: string;
  constructor(url: string, reason: string) {
    super(`cannot reach cubed at ${url} (${reason})`);
    this.name = 'DaemonUnreachableError';
    this.url = url;
  }
}

/** What POST /admin/v1/sandboxes takes (the actor comes from the API key). */
export type CreateSandboxRequest = Omit<ControlPlaneCreate, 'actor' | 'fromSnapshot'>;

/** One fork's outcome (POST /admin/v1/sandboxes/:id/fork). */
export type ForkAnswer = { sandbox: SandboxView } | { error: { code: number; message: string; status: number } };

/** What POST /admin/v1/sandboxes/:id/exec takes. */
export type ExecRequest = Omit<RuntimeExecRequest, 'stdin'>;

export interface SandboxFilter {
  state?: SandboxState[];
  nodeID?: string;
  templateID?: string;
}

export interface DrainOptions {
  evict?: boolean;
  deadlineSec?: number;
}

export interface Health {
  status: string;
  nodeID: string;
  version: string;
}

export interface ClientOptions {
  /** e.g. http://127.0.0.1:3000, or several control replicas comma-separated (tried in turn). */
  baseUrl: string;
  apiKey?: string;
  /**
   * How long one replica may take to start answering (DEFAULT_TIMEOUT_MS). A replica that is
   * frozen (SIGSTOP, a stalled host) still accepts connections and never answers: without it
   * `cubectl nodes` waited for ever on the first of two replicas. Calls that take long by nature
   * (creates, resumes, forks, exec: LONG_TIMEOUT_MS) wait at least that long; an import none.
   */
  timeoutMs?: number;
}

export const DEFAULT_TIMEOUT_MS = 10_000;
/** What the E2B SDK waits for a request by default: a create on a loaded node takes seconds. */
const LONG_TIMEOUT_MS = 60_000;

/** How one call is sent: whether it may be sent again to another replica after no answer, and how long it waits. */
interface CallOptions {
  /** Sending it twice does what sending it once does (GET, PUT, PATCH, DELETE are; a POST says so). */
  idempotent?: boolean;
  /** At least this long (LONG_TIMEOUT_MS), or 0: no limit (a streamed upload). */
  waitMs?: number;
}
const LONG: CallOptions = { waitMs: LONG_TIMEOUT_MS };
const IDEMPOTENT: CallOptions = { idempotent: true };

/** The control URLs of a comma-separated list (as `cubed --control` takes them), without trailing slashes. */
export function controlUrls(list: string): string[] {
  return list
    .split(',')
    .map((u) => u.trim().replace(/\/+$/, ''))
    .filter((u) => u !== '');
}

/**
 * Whether a request that failed this way may go to the next replica: any failure (no answer in
 * time included) for a request that is idempotent; for others only when the connection was never
 * made (the request cannot have been acted on).
 */
function mayFailOver(idempotent: boolean, code: string | undefined): boolean {
  return idempotent || (code !== undefined && NEVER_SENT.has(code));
}
const NEVER_SENT = new Set(['ECONNREFUSED', 'EHOSTUNREACH', 'ENETUNREACH', 'ENOTFOUND', 'EAI_AGAIN', 'UND_ERR_CONNECT_TIMEOUT']);

type Query = Record<string, string | number | undefined>;

/** A request body sent as it is (not JSON), streamed. */
class RawBody {
  constructor(
    readonly data: AsyncIterable<Uint8Array>,
    readonly contentType: string,
  ) {}
}

/** GET /templates/{id}/builds/{buildID}/status (the e2b SDK's TemplateBuildInfo). */
export interface BuildStatusView {
  status: BuildRecord['status'];
  logEntries: BuildLogEntry[];
  reason?: BuildRecord['reason'];
}

/** Template config given with an import (the image has no start or ready command). */
export interface ImportTemplateOptions {
  startCmd?: string;
  readyCmd?: string;
  readyTimeoutSec?: number;
  workdir?: string;
  user?: 'root' | 'user';
  /** The runtime its sandboxes run on when the create names none. */
  runtime?: TemplateRuntime;
}

export class CubeClient {
  private readonly urls: string[];
  /** The replica that answered last: requests go there first. */
  private current = 0;
  private readonly apiKey: string | undefined;
  private readonly timeoutMs: number;

  constructor(opts: ClientOptions) {
    this.urls = controlUrls(opts.baseUrl);
    if (this.urls.length === 0) throw new Error(`no control URL in ${JSON.stringify(opts.baseUrl)}`);
    this.apiKey = opts.apiKey;
    this.timeoutMs = opts.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  }

  /** The control URL requests go to first (the one that answered last). */
  get baseUrl(): string {
    return this.urls[this.current]!;
  }

  health(): Promise<Health> {
    return this.json('GET', '/health');
  }
  nodes(): Promise<NodeView[]> {
    return this.json('GET', '/admin/v1/nodes');
  }
  node(nodeID: string): Promise<NodeView> {
    return this.json('GET', `/admin/v1/nodes/${enc(nodeID)}`);
  }
  cordon(nodeID: string): Promise<NodeView> {
    return this.json('POST', `/admin/v1/nodes/${enc(nodeID)}/cordon`, undefined, undefined, IDEMPOTENT);
  }
  uncordon(nodeID: string): Promise<NodeView> {
    return this.json('POST', `/admin/v1/nodes/${enc(nodeID)}/uncordon`, undefined, undefined, IDEMPOTENT);
  }
  drain(nodeID: string, opts: DrainOptions = {}): Promise<NodeView> {
    return this.json('POST', `/admin/v1/nodes/${enc(nodeID)}/drain`, opts, undefined, IDEMPOTENT);
  }
  async deleteNode(nodeID: string): Promise<void> {
    await this.send('DELETE', `/admin/v1/nodes/${enc(nodeID)}`);
  }

  sandboxes(filter: SandboxFilter = {}): Promise<SandboxView[]> {
    return this.json('GET', '/admin/v1/sandboxes', undefined, { state: filter.state?.join(','), node: filter.nodeID, template: filter.templateID });
  }
  sandbox(id: string): Promise<SandboxView> {
    return this.json('GET', `/admin/v1/sandboxes/${enc(id)}`);
  }
  createSandbox(req: CreateSandboxRequest = {}): Promise<SandboxView> {
    return this.json('POST', '/admin/v1/sandboxes', req, undefined, LONG);
  }
  async deleteSandbox(id: string): Promise<void> {
    await this.send('DELETE', `/admin/v1/sandboxes/${enc(id)}`);
  }
  /** Replaces the sandbox's own egress rules; an empty request goes back to the node's defaults. */
  setEgress(id: string, req: EgressRequest): Promise<SandboxView> {
    return this.json('PUT', `/admin/v1/sandboxes/${enc(id)}/egress`, req);
  }
  /** `release`: free the memory where the runtime can (a microVM's goes to a file, QEMU ends). */
  pause(id: string, opts: PauseOptions = {}): Promise<SandboxView> {
    return this.json('POST', `/admin/v1/sandboxes/${enc(id)}/pause`, opts, undefined, LONG);
  }
  resume(id: string): Promise<SandboxView> {
    return this.json('POST', `/admin/v1/sandboxes/${enc(id)}/resume`, undefined, undefined, LONG);
  }
  snapshot(id: string, name?: string): Promise<SnapshotView> {
    return this.json('POST', `/admin/v1/sandboxes/${enc(id)}/snapshots`, name === undefined ? {} : { name }, undefined, LONG);
  }
  fork(id: string, opts: { count: number; timeoutSec?: number }): Promise<ForkAnswer[]> {
    return this.json('POST', `/admin/v1/sandboxes/${enc(id)}/fork`, opts, undefined, LONG);
  }
  snapshots(filter: { sandboxID?: string; name?: string } = {}): Promise<SnapshotView[]> {
    return this.json('GET', '/admin/v1/snapshots', undefined, { sandbox: filter.sandboxID, name: filter.name });
  }
  async deleteSnapshot(ref: string): Promise<void> {
    await this.send('DELETE', `/admin/v1/snapshots/${enc(ref)}`);
  }
  volumes(): Promise<VolumeView[]> {
    return this.json('GET', '/admin/v1/volumes');
  }
  volume(ref: string): Promise<VolumeView> {
    return this.json('GET', `/admin/v1/volumes/${enc(ref)}`);
  }
  createVolume(req: { name: string; sizeGiB?: number; owner?: string; nodeID?: string }): Promise<VolumeView> {
    return this.json('POST', '/admin/v1/volumes', req);
  }
  async deleteVolume(ref: string): Promise<void> {
    await this.send('DELETE', `/admin/v1/volumes/${enc(ref)}`);
  }

  /** Runs a command; yields `start`, output chunks and exactly one `end` (aborting the signal kills it). */
  async *exec(id: string, req: ExecRequest, signal?: AbortSignal): AsyncGenerator<ProcessEvent> {
    const res = await this.send('POST', `/admin/v1/sandboxes/${enc(id)}/exec`, req, undefined, signal, LONG);
    for await (const line of lines(res)) {
      if (line.trim() === '') continue;
      const ev = JSON.parse(line) as { type: string; data?: string };
      // Output stays bytes (the caller decides: a file gets them as they are); the rest is made safe.
      yield (
        ev.type === 'stdout' || ev.type === 'stderr' ? { type: ev.type, data: Buffer.from(ev.data ?? '', 'base64') } : terminalSafeDeep(ev)
      ) as ProcessEvent;
    }
  }

  /** What envd calls need (the E2B GET /sandboxes/:id answer): the replica to send them to and the sandbox's access token. */
  async envdAccess(id: string): Promise<{ baseUrl: string; sandboxID: string; token: string }> {
    const d = await this.json<{ sandboxID: string; envdAccessToken?: string }>('GET', `/sandboxes/${enc(id)}`);
    return { baseUrl: this.baseUrl, sandboxID: d.sandboxID, token: d.envdAccessToken ?? '' };
  }

  config(): Promise<ConfigView> {
    return this.json('GET', '/admin/v1/config');
  }
  reloadConfig(): Promise<ReloadResult> {
    return this.json('POST', '/admin/v1/config/reload', undefined, undefined, IDEMPOTENT);
  }
  setConfig(path: string, value: unknown): Promise<ReloadResult> {
    return this.json('PUT', '/admin/v1/config', { path, value });
  }

  keys(): Promise<KeyView[]> {
    return this.json('GET', '/admin/v1/keys');
  }
  key(ref: string): Promise<KeyView> {
    return this.json('GET', `/admin/v1/keys/${enc(ref)}`);
  }
  /** A new key: the answer's `key` is shown this once (the daemon keeps its hash). */
  createKey(req: { name: string; role?: KeyRole; quotas?: KeyQuotas }): Promise<NewKeyView> {
    return this.json('POST', '/admin/v1/keys', req);
  }
  /** A quota set to null goes back to its default. */
  setKey(ref: string, patch: { name?: string; role?: KeyRole; quotas?: { [K in keyof KeyQuotas]?: number | null } }): Promise<KeyView> {
    return this.json('PATCH', `/admin/v1/keys/${enc(ref)}`, patch);
  }
  async deleteKey(ref: string): Promise<void> {
    await this.send('DELETE', `/admin/v1/keys/${enc(ref)}`);
  }
  /** Operator actions, newest first (`actor`: one key id). */
  audit(q: { actor?: string; limit?: number } = {}): Promise<AuditView[]> {
    return this.json('GET', '/admin/v1/audit', undefined, q);
  }

  /** `since`: events after that id; `before`: the newest `limit` before that id (paging back into the history). */
  events(q: { since?: number; before?: number; limit?: number } = {}): Promise<EventView[]> {
    return this.json('GET', '/admin/v1/events', undefined, q);
  }
  stats(): Promise<StatsView> {
    return this.json('GET', '/admin/v1/stats');
  }
  /** What the sandbox's processes printed, oldest first, from `since` (ISO 8601, inclusive) on. */
  output(id: string, since?: string): Promise<OutputLine[]> {
    return this.json('GET', `/admin/v1/sandboxes/${enc(id)}/output`, undefined, { since });
  }

  /** Live use of every running and paused sandbox (their nodes' cgroup counters, read now). */
  usage(): Promise<SandboxUsage[]> {
    return this.json('GET', '/admin/v1/usage');
  }

  templates(): Promise<TemplateListing[]> {
    return this.json('GET', '/admin/v1/templates');
  }
  template(name: string): Promise<TemplateRecord> {
    return this.json('GET', `/admin/v1/templates/${enc(name)}`);
  }
  deleteTemplate(name: string): Promise<TemplateRecord> {
    return this.json('DELETE', `/admin/v1/templates/${enc(name)}`);
  }
  /** The E2B build flow (what the e2b SDK's Template.build calls): a build of NAME[:TAG] waiting for its steps. */
  requestBuild(req: { name: string; tags?: string[]; cpuCount?: number; memoryMB?: number }): Promise<{ templateID: string; buildID: string; tags: string[] }> {
    return this.json('POST', '/v3/templates', req);
  }
  /** Whether the daemon has a COPY's files, else a signed link to PUT them to. */
  templateFilesLink(templateID: string, hash: string): Promise<{ present: boolean; url?: string }> {
    return this.json('GET', `/templates/${enc(templateID)}/files/${enc(hash)}`);
  }
  /** PUTs an archive to an upload link (signed: no key sent). */
  async uploadTemplateFiles(url: string, archive: AsyncIterable<Uint8Array>): Promise<void> {
    const res = await fetch(url, { method: 'PUT', body: archive as unknown as NonNullable<RequestInit['body']>, duplex: 'half' } as RequestInit);
    if (!res.ok) throw new CubeClientError(terminalSafe(`upload of the build's files: HTTP ${res.status} ${(await res.text()).slice(0, 200)}`), 0, res.status);
  }
  async startBuild(templateID: string, buildID: string, body: unknown): Promise<void> {
    await this.send('POST', `/v2/templates/${enc(templateID)}/builds/${enc(buildID)}`, body, undefined, undefined, LONG);
  }
  buildStatus(templateID: string, buildID: string, logsOffset: number): Promise<BuildStatusView> {
    return this.json('GET', `/templates/${enc(templateID)}/builds/${enc(buildID)}/status`, undefined, { logsOffset });
  }
  /** Streams an image archive (docker-archive or oci-archive tar, plain or gzipped) to the daemon, which imports it. */
  async importTemplate(name: string, archive: AsyncIterable<Uint8Array>, opts: ImportTemplateOptions = {}): Promise<TemplateRecord> {
    const res = await this.send('POST', '/admin/v1/templates/import', new RawBody(archive, 'application/x-tar'), { name, ...opts }, undefined, { waitMs: 0 });
    return terminalSafeDeep(await res.json()) as TemplateRecord;
  }

  /**
   * Pulls a registry image into the daemon's layer store as template `name` (the daemon runs
   * skopeo; credentials go in the body, over this connection only). `onProgress` gets the
   * daemon's progress lines; the record ends it, or the daemon's error as a CubeClientError.
   */
  async pullTemplate(
    name: string,
    image: string,
    opts: ImportTemplateOptions & { username?: string; password?: string } = {},
    onProgress?: (line: string) => void,
  ): Promise<TemplateRecord & { pulled?: boolean }> {
    const res = await this.send('POST', '/admin/v1/templates/pull', { name, image, ...opts }, undefined, undefined, { waitMs: 0 });
    for await (const line of lines(res)) {
      if (!line) continue;
      const m = JSON.parse(line) as {
        progress?: string;
        record?: TemplateRecord & { pulled?: boolean };
        error?: { code?: number; status?: number; message?: string; details?: Record<string, unknown> };
      };
      if (m.progress !== undefined) onProgress?.(terminalSafe(m.progress));
      if (m.record) return terminalSafeDeep(m.record) as TemplateRecord & { pulled?: boolean };
      if (m.error) throw new CubeClientError(terminalSafe(m.error.message ?? 'pull failed'), m.error.code ?? 0, m.error.status ?? 500, m.error.details);
    }
    throw new CubeClientError('the daemon ended the pull without a result (it may have stopped): run the import again', 0, 502);
  }

  /** The watch stream: a snapshot first, then deltas, until the signal aborts or the daemon stops. */
  async *watch(signal?: AbortSignal): AsyncGenerator<WatchMessage> {
    const res = await this.send('GET', '/admin/v1/watch', undefined, undefined, signal);
    let data: string[] = [];
    for await (const line of lines(res)) {
      if (line === '') {
        if (data.length > 0) yield terminalSafeDeep(JSON.parse(data.join('\n'))) as WatchMessage;
        data = [];
      } else if (line.startsWith('data:')) {
        data.push(line.slice(5).replace(/^ /, ''));
      }
      // `event:` repeats the type that is inside the data; `:` lines are keep-alive comments.
    }
  }

  private async json<T>(method: string, path: string, body?: unknown, query?: Query, call?: CallOptions): Promise<T> {
    const res = await this.send(method, path, body, query, undefined, call);
    return terminalSafeDeep(await res.json()) as T;
  }

  /**
   * One request, to each control replica in turn (from the last that answered) while they cannot
   * be reached or, for an idempotent request, do not answer in time. A request that may have been
   * acted on (sent, no answer) is not sent again unless it is idempotent: the error says so.
   */
  private async send(method: string, path: string, body?: unknown, query?: Query, signal?: AbortSignal, call: CallOptions = {}): Promise<Response> {
    const headers: Record<string, string> = { accept: 'application/json' };
    if (this.apiKey) headers['x-api-key'] = this.apiKey;
    const init: RequestInit & { duplex?: 'half' } = { method, headers };
    if (body instanceof RawBody) {
      headers['content-type'] = body.contentType;
      init.body = body.data as unknown as NonNullable<RequestInit['body']>; // streamed: fetch takes an async iterable with duplex 'half'
      init.duplex = 'half';
    } else if (body !== undefined) {
      headers['content-type'] = 'application/json';
      init.body = JSON.stringify(body);
    }
    const idempotent = call.idempotent ?? ['GET', 'HEAD', 'PUT', 'PATCH', 'DELETE'].includes(method);
    const waitMs = call.waitMs === 0 ? 0 : Math.max(this.timeoutMs, call.waitMs ?? 0);
    let res: Response | undefined;
    const failed: string[] = [];
    for (let i = 0; res === undefined; i++) {
      const k = (this.current + i) % this.urls.length;
      const url = new URL(this.urls[k]! + path);
      for (const [q, v] of Object.entries(query ?? {})) if (v !== undefined && v !== '') url.searchParams.set(q, String(v));
      // The timer stops once the answer starts: a stream (watch, exec output) then runs as long as it
      // runs, until the caller's signal aborts it. The fetch follows that signal for the whole body,
      // not just until the headers: a listener removed once they came left an aborted watch reading
      // on (the stream ended only when the daemon closed it).
      const attempt = new AbortController();
      const both = signal ? AbortSignal.any([signal, attempt.signal]) : attempt.signal;
      let timedOut = false as boolean; // set by the timer below
      const timer =
        waitMs > 0
          ? setTimeout(() => {
              timedOut = true;
              attempt.abort(new Error(`no answer in ${waitMs / 1000} s`));
            }, waitMs)
          : undefined;
      try {
        if (signal?.aborted) throw signal.reason;
        res = await fetch(url, { ...init, signal: both });
        this.current = k;
      } catch (e) {
        if (signal?.aborted) throw e;
        const cause = (e as { cause?: { code?: string; message?: string } }).cause;
        const why = timedOut ? `no answer in ${waitMs / 1000} s` : (cause?.code ?? cause?.message ?? (e as Error).message);
        failed.push(`${this.urls[k]}: ${why}`);
        // A streamed body is read once: it is not sent again.
        if (i + 1 >= this.urls.length || body instanceof RawBody || !mayFailOver(idempotent, timedOut ? undefined : cause?.code)) {
          const where = this.urls.length === 1 ? this.urls[0]! : this.urls.join(',');
          const unsure =
            timedOut && !idempotent
              ? `; ${method} ${path} may have been carried out, so it was not sent to another replica: check before running it again`
              : '';
          throw new DaemonUnreachableError(where, (failed.length === 1 ? why : failed.join('; ')) + unsure);
        }
      } finally {
        clearTimeout(timer);
      }
    }
    if (res.ok) return res;
    const text = await res.text();
    let parsed: { code?: unknown; message?: unknown; details?: unknown } | undefined;
    try {
      parsed = JSON.parse(text) as typeof parsed;
    } catch {
      parsed = undefined;
    }
    const message = typeof parsed?.message === 'string' ? parsed.message : `HTTP ${res.status} ${res.statusText}${text ? `: ${text.slice(0, 200)}` : ''}`;
    const details = parsed?.details && typeof parsed.details === 'object' ? terminalSafeDeep(parsed.details as Record<string, unknown>) : undefined;
    throw new CubeClientError(terminalSafe(message), typeof parsed?.code === 'number' ? parsed.code : 0, res.status, details);
  }
}

const enc = encodeURIComponent;

async function* lines(res: Response): AsyncGenerator<string> {
  if (!res.body) return;
  const decoder = new TextDecoder();
  let buf = '';
  for await (const chunk of res.body) {
    buf += decoder.decode(chunk as Uint8Array, { stream: true });
    let nl: number;
    while ((nl = buf.indexOf('\n')) >= 0) {
      yield buf.slice(0, nl).replace(/\r$/, '');
      buf = buf.slice(nl + 1);
    }
  }
  buf += decoder.decode();
  if (buf !== '') yield buf;
}
