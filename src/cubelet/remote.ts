// NodeApi over HTTP/JSON: what a control plane holds for each compute node. Errors the node
// answers come back as the same CubeErrors; a node that cannot be reached is 130596.
import { Agent, request as httpRequest } from 'node:http';
import { createInterface } from 'node:readline';
import { Readable } from 'node:stream';
import type { ReadableStream as WebReadableStream } from 'node:stream/web';
import { CubeError } from '../errors.js';
import { answerError, errorOf } from '../http.js';
import type { NodeView } from '../model/node.js';
import { snapshotWithEpochTime, type EgressRequest, type PauseOptions, type SandboxUsage, type SandboxView } from '../model/sandbox.js';
import type { OutputLine } from './output-log.js';
import { stoppable } from '../runtime/stoppable.js';
import type { FileMetadata, FileStat, FsChange, VolumeHost, WatchRequest } from '../runtime/types.js';
import { remoteVolumes } from './rpc-volumes.js';
import type { TemplateRecord } from '../templates/store.js';
import type { BuildRecord } from '../templates/build/build.js';
import {
  DEADLINE_HEADER,
  decodeProcessEvent,
  FENCE_HEADER,
  type ImportRequest,
  nodeEventWithEpochTimes,
  PROXY_SECRET_HEADER,
  proxyPath,
  reviveStats,
  RPC_PREFIX,
  type JsonMethod,
  type WireProcessEvent,
} from './rpc-wire.js';
import type { HeldTemplate } from '../templates/fetch.js';
import type {
  NodeApi,
  NodeCreateRequest,
  NodeEvent,
  NodeSnapshot,
  PortUpstream,
  ProcessEvent,
  ProcessInfo,
  ProcessStream,
  StartProcessRequest,
} from './types.js';

/** The node's clock when it answered, per result object (rpc-server.ts adds it to every answer). */
const answered = new WeakMap<object, number>();

/** When (node clock, ms) the node produced this answer; undefined for in-process nodes and older nodes. */
export function answeredAt(result: object): number | undefined {
  return answered.get(result);
}

/**
 * Connections kept open for the JSON calls. Free ones close after 4 s, before the node's server
 * drops them (Node's keepAliveTimeout, 5 s): a request sent on a socket the server is closing
 * fails as unreachable.
 */
const JSON_AGENT = new Agent({ keepAlive: true, timeout: 4000 });

/**
 * POST `body` to an http:// URL and read the whole answer: plain node:http for the JSON calls,
 * which are most of the node RPC (a create, a destroy). fetch (undici, web streams) cost about
 * 7% of the control's busy CPU in the 1000-node bench for the creates' calls alone.
 * `bound`: a timeout in ms, or a signal that ends the call.
 */
function postJson(
  url: URL,
  headers: Record<string, string>,
  body: string,
  bound: number | AbortSignal,
  retry = true,
): Promise<{ status: number; text: string }> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(url, { method: 'POST', agent: JSON_AGENT, headers: { ...headers, 'content-length': Buffer.byteLength(body) } }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => {
        clearTimeout(timer);
        resolve({ status: res.statusCode ?? 0, text: Buffer.concat(chunks).toString('utf8') });
      });
      res.on('error', fail);
    });
    const abort = (): void => void req.destroy(typeof bound === 'number' ? new Error(`no answer within ${bound} ms`) : (bound.reason as Error));
    const timer = typeof bound === 'number' ? setTimeout(abort, bound) : undefined;
    if (typeof bound !== 'number') {
      if (bound.aborted) abort();
      else bound.addEventListener('abort', abort, { once: true });
    }
    function fail(e: Error): void {
      clearTimeout(timer);
      // A kept-alive socket the node closed as this request went out: the node never read it.
      if (retry && req.reusedSocket && (e as NodeJS.ErrnoException).code === 'ECONNRESET') resolve(postJson(url, headers, body, bound, false));
      else reject(e);
    }
    req.on('error', fail);
    req.end(body);
  });
}

export class RemoteNode implements NodeApi {
  private readonly listeners = new Set<(e: NodeEvent) => void>();
  private eventsAbort?: AbortController;

  constructor(
    readonly nodeID: string,
    /** http://host:port of the node's RPC listener. */
    readonly address: string,
    private readonly secret: string,
    readonly timeoutMs = 30_000,
    /** The lock fence its calls carry (withFence). */
    private readonly fence?: string,
  ) {}

  /** This node's client whose calls carry `fence`, the token of the sandbox lock the caller holds (rpc-wire.ts FENCE_HEADER). */
  withFence(fence: string): RemoteNode {
    return new RemoteNode(this.nodeID, this.address, this.secret, this.timeoutMs, fence);
  }

  private async request(
    method: string,
    init: {
      body?: Buffer | string | ReadableStream;
      query?: Record<string, string | undefined>;
      contentType?: string;
      timeout?: boolean | number;
      signal?: AbortSignal;
    },
  ): Promise<Response> {
    // The address may carry a path (one listener serving many simulated nodes): keep it.
    const url = new URL(this.address.replace(/\/+$/, '') + RPC_PREFIX + method);
    for (const [k, v] of Object.entries(init.query ?? {})) if (v !== undefined) url.searchParams.set(k, v);
    let res: Response;
    try {
      res = await fetch(url, {
        method: 'POST',
        headers: this.headers(init.contentType ?? 'application/json'),
        // duplex: a streamed body (an import forwarded as it arrives) needs it; harmless for the others.
        ...(init.body !== undefined ? ({ body: init.body, duplex: 'half' } as RequestInit) : {}),
        signal: init.signal ?? (init.timeout === false ? undefined : AbortSignal.timeout(typeof init.timeout === 'number' ? init.timeout : this.timeoutMs)),
      });
    } catch (e) {
      throw this.unreachable(e);
    }
    if (res.ok) return res;
    throw await answerError(res, `node ${this.nodeID}`);
  }

  /**
   * A fenced call (one under a sandbox lock) carries its deadline, the end of this call's timeout:
   * the node refuses it after that (DEADLINE_HEADER), so an error answered for a frozen node is
   * never undone by the node carrying the call out when it wakes.
   */
  private headers(contentType: string, deadline?: number): Record<string, string> {
    const by = deadline ?? (this.fence !== undefined ? Date.now() + this.timeoutMs : undefined);
    return {
      authorization: `Bearer ${this.secret}`,
      'content-type': contentType,
      ...(this.fence !== undefined ? { [FENCE_HEADER]: this.fence } : {}),
      ...(by !== undefined ? { [DEADLINE_HEADER]: String(by) } : {}),
    };
  }

  private unreachable(e: unknown): CubeError {
    return new CubeError('NODE_UNREACHABLE', `node ${this.nodeID} at ${this.address} unreachable: ${(e as Error).message}`, { cause: e, retryAfter: 1 });
  }

  private json<T>(method: JsonMethod | 'sendInput', ...args: unknown[]): Promise<T> {
    return this.jsonWith(method, {}, args);
  }

  /** `signal`: ends the call instead of the call timeout (a create bounded by its fetch's progress). */
  private async jsonWith<T>(method: JsonMethod | 'sendInput', init: { signal?: AbortSignal; deadline?: number }, args: unknown[]): Promise<T> {
    const url = new URL(this.address.replace(/\/+$/, '') + RPC_PREFIX + method);
    const body = JSON.stringify({ args });
    let answer: { result: T; at?: number };
    if (url.protocol === 'http:') {
      let res: { status: number; text: string };
      try {
        res = await postJson(url, this.headers('application/json', init.deadline), body, init.signal ?? this.timeoutMs);
      } catch (e) {
        throw this.unreachable(e);
      }
      if (res.status < 200 || res.status > 299) throw errorOf(res.status, res.text, `node ${this.nodeID}`);
      answer = JSON.parse(res.text) as typeof answer;
    } else answer = (await (await this.request(method, { body, ...init })).json()) as typeof answer;
    const { result, at } = answer;
    if (typeof result === 'object' && result !== null && typeof at === 'number') answered.set(result, at);
    return reviveStats(result);
  }

  private async ndjson(res: Response): Promise<AsyncIterable<string>> {
    return createInterface({ input: Readable.fromWeb(res.body as WebReadableStream<Uint8Array>), crlfDelay: Infinity });
  }

  private async processStream(method: 'startProcess' | 'connectProcess', args: unknown[]): Promise<ProcessStream> {
    const res = await this.request(method, { body: JSON.stringify({ args }), timeout: false });
    const lines = (await this.ndjson(res))[Symbol.asyncIterator]();
    const first = await lines.next();
    if (first.done) throw new CubeError('NODE_UNREACHABLE', `node ${this.nodeID} closed the process stream`);
    const start = decodeProcessEvent(JSON.parse(first.value) as WireProcessEvent);
    if (start.type !== 'start') throw new CubeError('INTERNAL', `process stream from ${this.nodeID} did not begin with start`);
    async function* events(): AsyncGenerator<ProcessEvent> {
      yield start;
      for (let r = await lines.next(); !r.done; r = await lines.next()) if (r.value) yield decodeProcessEvent(JSON.parse(r.value) as WireProcessEvent);
    }
    return { pid: start.pid, events: events() };
  }

  readMetadata(sandboxID: string, paths: string[], user?: string): Promise<FileMetadata[]> {
    return this.json('readMetadata', sandboxID, paths, user);
  }
  writeMetadata(sandboxID: string, path: string, meta: FileMetadata, user?: string): Promise<void> {
    return this.json('writeMetadata', sandboxID, path, meta, user);
  }
  processOutput(sandboxID: string): Promise<OutputLine[]> {
    return this.json('processOutput', sandboxID);
  }
  sandboxUsage(): Promise<SandboxUsage[]> {
    return this.json('sandboxUsage');
  }

  async watchDir(sandboxID: string, req: WatchRequest): Promise<AsyncIterable<FsChange>> {
    const ac = new AbortController();
    const res = await this.request('watchDir', { body: JSON.stringify({ args: [sandboxID, req] }), timeout: false, signal: ac.signal });
    const lines = (await this.ndjson(res))[Symbol.asyncIterator]();
    // The node answers its first line once the watch is set (or an error status before it).
    const ready = await lines.next();
    if (ready.done) throw new CubeError('NODE_UNREACHABLE', `node ${this.nodeID} closed the watch stream`);
    async function* changes(): AsyncGenerator<FsChange> {
      for (let r = await lines.next(); !r.done; r = await lines.next()) if (r.value) yield JSON.parse(r.value) as FsChange;
    }
    return stoppable(changes(), () => ac.abort()); // the node's watcher ends with this request
  }

  /**
   * A create fetches the template's layers first where the node lacks them (templates/fetch.ts), which
   * takes as long as the layers are large: the call is bounded by progress, not in total. Each
   * time the call timeout passes without an answer, the node is asked how many layer bytes it has
   * fetched: the create is given up (130596) only when no fetch runs there or no byte came since
   * the last look.
   */
  async createSandbox(req: NodeCreateRequest): Promise<SandboxView> {
    const ac = new AbortController();
    let done = false;
    let seen: number | undefined;
    let timer: NodeJS.Timeout | undefined;
    // The caller's deadline (sandbox.create_deadline_sec) bounds the first wait; a node that is
    // fetching layers for it is waited for as long as bytes come.
    const firstMs = req.deadline !== undefined ? Math.max(0, req.deadline - Date.now()) : this.timeoutMs;
    const look = async () => {
      // A short look: a node that does not answer it (frozen, gone) ends the wait at once, not a call timeout later.
      const p = await this.result<{ bytes: number; active: number }>(
        'fetchProgress',
        [],
        Math.min(req.deadline !== undefined ? 2000 : 5000, this.timeoutMs),
      ).catch(() => undefined); // no answer: the look says nothing, the wait goes on
      if (done) return;
      if (p && p.active > 0 && p.bytes !== seen) {
        seen = p.bytes;
        timer = setTimeout(() => void look(), this.timeoutMs);
        return;
      }
      ac.abort(
        new Error(
          `no answer to the create within ${(seen === undefined ? firstMs : this.timeoutMs) / 1000} s${p?.active ? `, and no layer byte fetched there in the last ${this.timeoutMs / 1000} s` : ''}`,
        ),
      );
    };
    timer = setTimeout(() => void look(), firstMs);
    try {
      return await this.jsonWith<SandboxView>('createSandbox', { signal: ac.signal, ...(req.deadline !== undefined ? { deadline: req.deadline } : {}) }, [req]);
    } finally {
      done = true;
      clearTimeout(timer);
    }
  }
  destroySandbox(sandboxID: string): Promise<void> {
    return this.json('destroySandbox', sandboxID);
  }
  pauseSandbox(sandboxID: string, opts?: PauseOptions): Promise<SandboxView> {
    return this.json('pauseSandbox', sandboxID, opts);
  }
  resumeSandbox(sandboxID: string): Promise<SandboxView> {
    return this.json('resumeSandbox', sandboxID);
  }
  async getSandbox(sandboxID: string): Promise<SandboxView | undefined> {
    return (await this.json<SandboxView | null>('getSandbox', sandboxID)) ?? undefined;
  }
  listSandboxes(): Promise<SandboxView[]> {
    return this.json('listSandboxes');
  }
  setEndAt(sandboxID: string, endAt: number): Promise<SandboxView> {
    return this.json('setEndAt', sandboxID, endAt);
  }
  setEgress(sandboxID: string, req: EgressRequest): Promise<SandboxView> {
    return this.json('setEgress', sandboxID, req);
  }
  async snapshotSandbox(sandboxID: string, snapshotID: string): Promise<NodeSnapshot> {
    return snapshotWithEpochTime(await this.json<NodeSnapshot>('snapshotSandbox', sandboxID, snapshotID));
  }
  async deleteSnapshot(snapshotID: string): Promise<void> {
    await this.json('deleteSnapshot', snapshotID);
  }
  listSnapshots(): Promise<string[]> {
    return this.json('listSnapshots');
  }
  sandboxAddress(sandboxID: string): Promise<string> {
    return this.json('sandboxAddress', sandboxID);
  }
  startProcess(sandboxID: string, req: StartProcessRequest): Promise<ProcessStream> {
    return this.processStream('startProcess', [sandboxID, req]);
  }
  connectProcess(sandboxID: string, sel: { pid?: number; tag?: string }): Promise<ProcessStream> {
    return this.processStream('connectProcess', [sandboxID, sel]);
  }
  listProcesses(sandboxID: string): Promise<ProcessInfo[]> {
    return this.json('listProcesses', sandboxID);
  }
  sendInput(sandboxID: string, pid: number, data: Buffer): Promise<void> {
    return this.json('sendInput', sandboxID, pid, data.toString('base64'));
  }
  closeStdin(sandboxID: string, pid: number): Promise<void> {
    return this.json('closeStdin', sandboxID, pid);
  }
  signalProcess(sandboxID: string, pid: number, signal: 'SIGKILL' | 'SIGTERM' | 'SIGINT'): Promise<void> {
    return this.json('signalProcess', sandboxID, pid, signal);
  }
  resizeProcess(sandboxID: string, pid: number, cols: number, rows: number): Promise<void> {
    return this.json('resizeProcess', sandboxID, pid, cols, rows);
  }
  /** The node's volumes, over the node RPC (rpc-volumes.ts). */
  get volumes(): VolumeHost {
    return remoteVolumes((method, init) => this.request(method, init), this.nodeID);
  }
  statFile(sandboxID: string, path: string, user?: string): Promise<FileStat> {
    return this.json('statFile', sandboxID, path, user);
  }
  listDir(sandboxID: string, path: string, depth?: number, user?: string): Promise<FileStat[]> {
    return this.json('listDir', sandboxID, path, depth, user);
  }
  async readFile(sandboxID: string, path: string, user?: string): Promise<Readable> {
    const res = await this.request('readFile', { query: { sandboxID, path, user }, timeout: false });
    return Readable.fromWeb(res.body as WebReadableStream<Uint8Array>);
  }
  async writeFile(sandboxID: string, path: string, data: Readable | Buffer, user?: string): Promise<FileStat> {
    const body = Buffer.isBuffer(data) ? data : Buffer.concat(await data.toArray());
    const res = await this.request('writeFile', { query: { sandboxID, path, user }, body, contentType: 'application/octet-stream' });
    return reviveStats(((await res.json()) as { result: FileStat }).result);
  }
  makeDir(sandboxID: string, path: string, user?: string): Promise<boolean> {
    return this.json('makeDir', sandboxID, path, user);
  }
  removePath(sandboxID: string, path: string, user?: string): Promise<void> {
    return this.json('removePath', sandboxID, path, user);
  }
  movePath(sandboxID: string, from: string, to: string, user?: string): Promise<FileStat> {
    return this.json('movePath', sandboxID, from, to, user);
  }
  nodeView(): Promise<NodeView> {
    return this.json('nodeView');
  }
  /** The node's record of template `name` and its layers' tree digests (served with a LayerServer). */
  templateRecord(name: string): Promise<HeldTemplate> {
    return this.result('templateRecord', [name]);
  }
  /** Imports the archive `body` into the node's store (the control replica forwarding an upload). */
  async importImage(body: Readable, req: ImportRequest): Promise<TemplateRecord> {
    const res = await this.request('importImage', {
      query: { import: JSON.stringify(req) },
      body: Readable.toWeb(body) as ReadableStream,
      contentType: 'application/octet-stream',
      timeout: false,
    });
    return ((await res.json()) as { result: TemplateRecord }).result;
  }
  private async result<T>(method: string, args: unknown[], timeout: boolean | number = true): Promise<T> {
    const res = await this.request(method, { body: JSON.stringify({ args }), timeout });
    return ((await res.json()) as { result: T }).result;
  }
  /** The node's template records (where a template's children live, for a cluster-wide rm). */
  templateRecords(): Promise<TemplateRecord[]> {
    return this.result('templateRecords', []);
  }
  /** Removes template `name` from the node's store (409 while one of its sandboxes or templates uses it). */
  removeTemplate(name: string): Promise<TemplateRecord> {
    return this.result('removeTemplate', [name]);
  }
  /** Adds tags to template `target` in the node's store. */
  tagTemplate(target: string, tags: string[]): Promise<{ from: TemplateRecord; tags: string[] }> {
    return this.result('tagTemplate', [target, tags]);
  }
  /** A build on this node (TemplateBuilder.request). */
  buildRequest(o: { name: string; tags?: string[]; cpuCount?: number; memoryMB?: number }): Promise<BuildRecord> {
    return this.result('buildRequest', [o]);
  }
  /** Starts the build's steps; waits for no step, but for a base template the node fetches first (no timeout). */
  async buildStart(templateID: string, buildID: string, body: unknown, owner?: string): Promise<void> {
    await this.result('buildStart', [templateID, buildID, body, owner], false);
  }
  buildGet(templateID: string, buildID: string): Promise<BuildRecord> {
    return this.result('buildGet', [templateID, buildID]);
  }
  buildList(templateID: string): Promise<BuildRecord[]> {
    return this.result('buildList', [templateID]);
  }
  buildHasFiles(hash: string, owner?: string): Promise<boolean> {
    return this.result('buildHasFiles', [hash, owner]);
  }
  /** A COPY step's upload (the SDK's tar), streamed to the node building it. */
  async buildFiles(hash: string, body: Readable, owner?: string): Promise<void> {
    await this.request('buildFiles', {
      query: { hash, owner },
      body: Readable.toWeb(body) as ReadableStream,
      contentType: 'application/octet-stream',
      timeout: false,
    });
  }
  /** Layer `digest` as a tar (layers/pack.ts); the body streams for as long as it takes. */
  async layer(digest: string): Promise<Response> {
    return this.request('layer', { query: { digest }, timeout: false });
  }
  /** The sandbox's address is private to the node: port traffic goes through the node's port proxy. */
  portUpstream(sandboxID: string, port: number, path: string): PortUpstream {
    const u = new URL(this.address);
    return {
      host: u.hostname.replace(/^\[|\]$/g, ''),
      port: Number(u.port) || 80,
      path: u.pathname.replace(/\/+$/, '') + proxyPath(sandboxID, port, path),
      headers: { [PROXY_SECRET_HEADER]: this.secret },
    };
  }

  /** One event stream per RemoteNode, reopened after a break while anyone listens. */
  subscribe(listener: (e: NodeEvent) => void): () => void {
    this.listeners.add(listener);
    if (!this.eventsAbort) void this.followEvents();
    return () => {
      this.listeners.delete(listener);
      if (this.listeners.size === 0) {
        this.eventsAbort?.abort();
        this.eventsAbort = undefined;
      }
    };
  }

  private async followEvents(): Promise<void> {
    const abort = new AbortController();
    this.eventsAbort = abort;
    // A call, not the property: the flag changes while the stream is awaited (narrowing would say it cannot).
    const aborted = () => abort.signal.aborted;
    while (!aborted()) {
      try {
        const res = await this.request('events', { signal: abort.signal });
        for await (const line of await this.ndjson(res)) if (line) for (const l of this.listeners) l(nodeEventWithEpochTimes(JSON.parse(line) as NodeEvent));
      } catch {
        // Reopened below; the control plane learns of a dead node from missed heartbeats.
      }
      if (!aborted()) await new Promise((r) => setTimeout(r, 1000));
    }
  }
}
