// NodeApi through the node API's Connect client (proto/node/cube/node/v1/node.proto): what a
// control plane holds for each compute node. Errors the node answers come back as the same
// CubeErrors (node-wire.ts nodeErrorIn); a node that cannot be reached is 130596.
import { Agent } from 'node:http';
import { Readable } from 'node:stream';
import type { ReadableStream as WebReadableStream } from 'node:stream/web';
import { fromBinary, type DescMessage, type MessageInitShape, type MessageShape } from '@bufbuild/protobuf';
import { createClient, type CallOptions, type Client } from '@connectrpc/connect';
import { createConnectTransport } from '@connectrpc/connect-node';
import { CubeError } from '../errors.js';
import { answerError } from '../http.js';
import type { NodeView } from '../model/node.js';
import type { EgressRequest, PauseOptions, SandboxUsage, SandboxView } from '../model/sandbox.js';
import type { OutputLine } from './output-log.js';
import { stoppable } from '../runtime/stoppable.js';
import type { FileMetadata, FileStat, FsChange, VolumeHost, WatchRequest } from '../runtime/types.js';
import type { TemplateRecord } from '../templates/store.js';
import type { BuildRecord } from '../templates/build/build.js';
import { AT_HEADER, DEADLINE_HEADER, FENCE_HEADER, type ImportRequest, PROXY_SECRET_HEADER, proxyPath, RPC_PREFIX } from './rpc-wire.js';
import type { HeldTemplate } from '../templates/fetch.js';
import type { HeldImage } from '../templates/layers/pull.js';
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
import { FileStatSchema, NodeService, NodeTemplates, NodeVolumes, type ProcessEvent as WireProcessEvent } from './gen/cube/node/v1/node_pb.js';
import {
  createOut,
  egressOut,
  fileStatIn,
  fromJsonBytes,
  nodeErrorIn,
  nodeEventIn,
  nodeViewIn,
  outputLineIn,
  processEventIn,
  processInfoIn,
  sandboxIn,
  snapshotIn,
  startOut,
  toJsonBytes,
  usageIn,
  volumeMetadataOut,
  volumeOptionsOut,
  watchEventIn,
} from './node-wire.js';
import { postUnary, type Unary } from './node-unary.js';

/** The node's clock when it answered, per result object (rpc-server.ts sends it with every unary answer: AT_HEADER). */
const answered = new WeakMap<object, number>();

/** When (node clock, ms) the node produced this answer; undefined for in-process nodes. */
export function answeredAt(result: object): number | undefined {
  return answered.get(result);
}

/**
 * Connections kept open for the node calls (HTTP/1.1, as the JSON calls before them; the streams' too). Free ones
 * close after 4 s, before the node's server drops them (Node's keepAliveTimeout, 5 s): a request
 * sent on a socket the server is closing fails as unreachable.
 */
const AGENT = new Agent({ keepAlive: true, timeout: 4000 });

/** One node's Connect client for the streams (unary calls: node-unary.ts), shared by its fenced copies (withFence). */
type Clients = Client<typeof NodeService>;

function clientsOf(address: string): Clients {
  const transport = createConnectTransport({
    // The address may carry a path (one listener serving many simulated nodes): calls go under it.
    baseUrl: address.replace(/\/+$/, ''),
    httpVersion: '1.1',
    ...(address.startsWith('http:') ? { nodeOptions: { agent: AGENT } } : {}),
    // Answers are small or already compact (a file's bytes): compressing them costs the node CPU for nothing on a LAN.
    acceptCompression: [],
  });
  return createClient(NodeService, transport);
}

/** How long a call may take: a timeout in ms, a signal that ends it, or unbounded (streams, a build's start). */
type Bound = number | AbortSignal | false;

export class RemoteNode implements NodeApi {
  private readonly listeners = new Set<(e: NodeEvent) => void>();
  private eventsAbort?: AbortController;
  private readonly rpc: Clients;
  private readonly agent: Agent | undefined;

  constructor(
    readonly nodeID: string,
    /** http://host:port of the node's RPC listener. */
    readonly address: string,
    private readonly secret: string,
    readonly timeoutMs = 30_000,
    /** The lock fence its calls carry (withFence). */
    private readonly fence?: string,
    rpc?: Clients,
  ) {
    this.rpc = rpc ?? clientsOf(address);
    this.agent = address.startsWith('http:') ? AGENT : undefined;
  }

  /** This node's client whose calls carry `fence`, the token of the sandbox lock the caller holds (rpc-wire.ts FENCE_HEADER). */
  withFence(fence: string): RemoteNode {
    return new RemoteNode(this.nodeID, this.address, this.secret, this.timeoutMs, fence, this.rpc);
  }

  /**
   * A fenced call (one under a sandbox lock) carries its deadline, the end of this call's timeout:
   * the node refuses it after that (DEADLINE_HEADER), so an error answered for a frozen node is
   * never undone by the node carrying the call out when it wakes.
   */
  private headers(deadline?: number): Record<string, string> {
    const by = deadline ?? (this.fence !== undefined ? Date.now() + this.timeoutMs : undefined);
    return {
      authorization: `Bearer ${this.secret}`,
      ...(this.fence !== undefined ? { [FENCE_HEADER]: this.fence } : {}),
      ...(by !== undefined ? { [DEADLINE_HEADER]: String(by) } : {}),
    };
  }

  private unreachable(message: string, cause?: unknown): CubeError {
    return new CubeError('NODE_UNREACHABLE', `node ${this.nodeID} at ${this.address} unreachable: ${message}`, { cause, retryAfter: 1 });
  }

  private failed(e: unknown): CubeError {
    return nodeErrorIn(e, (m, cause) => this.unreachable(m, cause));
  }

  /**
   * One unary call: `f` with this node's headers under `bound`, its answer mapped by `map`, and
   * the node's clock at the answer kept for the result (answeredAt).
   */
  private async unary<I extends DescMessage, O extends DescMessage, R>(
    method: Unary<I, O>,
    init: MessageInitShape<I>,
    map: (m: MessageShape<O>) => R,
    bound: Bound = this.timeoutMs,
    deadline?: number,
  ): Promise<R> {
    let at: number | undefined;
    let m: MessageShape<O>;
    try {
      m = await postUnary(this.address, method, init, this.headers(deadline), bound === false ? undefined : bound, this.agent, (res) => {
        at = Number(res.headers[AT_HEADER]);
      });
    } catch (e) {
      throw this.failed(e);
    }
    const result = map(m);
    if (typeof result === 'object' && result !== null && at !== undefined && Number.isFinite(at)) answered.set(result, at);
    return result;
  }

  /**
   * A server stream: opened with this node's headers, its first message read before this returns
   * (an error the node answers at once is thrown here). Ending the iteration early hangs up.
   */
  private async stream<M>(open: (o: CallOptions) => AsyncIterable<M>): Promise<{ first: IteratorResult<M>; rest: AsyncGenerator<M>; stop: () => void }> {
    const ac = new AbortController();
    const it = open({ headers: this.headers(), signal: ac.signal })[Symbol.asyncIterator]();
    const next = async (): Promise<IteratorResult<M>> => {
      try {
        return await it.next();
      } catch (e) {
        throw this.failed(e);
      }
    };
    const first = await next();
    async function* rest(): AsyncGenerator<M> {
      try {
        for (let r = await next(); !r.done; r = await next()) yield r.value;
      } finally {
        ac.abort();
      }
    }
    return { first, rest: rest(), stop: () => ac.abort() };
  }

  private async processStream(open: (o: CallOptions) => AsyncIterable<WireProcessEvent>): Promise<ProcessStream> {
    const { first, rest } = await this.stream(open);
    if (first.done) throw new CubeError('NODE_UNREACHABLE', `node ${this.nodeID} closed the process stream`);
    const start = processEventIn(first.value);
    if (start?.type !== 'start') throw new CubeError('INTERNAL', `process stream from ${this.nodeID} did not begin with start`);
    const begin: ProcessEvent = start;
    async function* events(): AsyncGenerator<ProcessEvent> {
      yield begin;
      for await (const m of rest) {
        const e = processEventIn(m);
        if (e) yield e;
      }
    }
    return { pid: start.pid, events: events() };
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
      const lookMs = Math.min(req.deadline !== undefined ? 2000 : 5000, this.timeoutMs);
      // No answer (or no template store there): the look says nothing, the wait goes on.
      const p = await this.unary(NodeTemplates.method.fetchProgress, {}, (m) => m, lookMs).catch(() => undefined);
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
      return await this.unary(NodeService.method.createSandbox, createOut(req), sandboxIn, ac.signal, req.deadline);
    } finally {
      done = true;
      clearTimeout(timer);
    }
  }
  destroySandbox(sandboxID: string): Promise<void> {
    return this.unary(NodeService.method.destroySandbox, { sandboxId: sandboxID }, () => undefined);
  }
  pauseSandbox(sandboxID: string, opts?: PauseOptions): Promise<SandboxView> {
    return this.unary(NodeService.method.pauseSandbox, { sandboxId: sandboxID, ...(opts?.release !== undefined ? { release: opts.release } : {}) }, sandboxIn);
  }
  resumeSandbox(sandboxID: string): Promise<SandboxView> {
    return this.unary(NodeService.method.resumeSandbox, { sandboxId: sandboxID }, sandboxIn);
  }
  getSandbox(sandboxID: string): Promise<SandboxView | undefined> {
    return this.unary(NodeService.method.getSandbox, { sandboxId: sandboxID }, (m) => (m.sandbox ? sandboxIn(m.sandbox) : undefined));
  }
  listSandboxes(): Promise<SandboxView[]> {
    return this.unary(NodeService.method.listSandboxes, {}, (m) => m.sandboxes.map(sandboxIn));
  }
  setEndAt(sandboxID: string, endAt: number): Promise<SandboxView> {
    return this.unary(NodeService.method.setEndAt, { sandboxId: sandboxID, endAt }, sandboxIn);
  }
  setEgress(sandboxID: string, req: EgressRequest): Promise<SandboxView> {
    return this.unary(NodeService.method.setEgress, { sandboxId: sandboxID, egress: egressOut(req) }, sandboxIn);
  }
  snapshotSandbox(sandboxID: string, snapshotID: string): Promise<NodeSnapshot> {
    return this.unary(NodeService.method.snapshotSandbox, { sandboxId: sandboxID, snapshotId: snapshotID }, snapshotIn);
  }
  deleteSnapshot(snapshotID: string): Promise<void> {
    return this.unary(NodeService.method.deleteSnapshot, { snapshotId: snapshotID }, () => undefined);
  }
  listSnapshots(): Promise<string[]> {
    return this.unary(NodeService.method.listSnapshots, {}, (m) => m.snapshotIds);
  }
  sandboxAddress(sandboxID: string): Promise<string> {
    return this.unary(NodeService.method.sandboxAddress, { sandboxId: sandboxID }, (m) => m.address);
  }
  sandboxUsage(): Promise<SandboxUsage[]> {
    return this.unary(NodeService.method.sandboxUsage, {}, (m) => m.usage.map(usageIn));
  }
  nodeView(): Promise<NodeView> {
    return this.unary(NodeService.method.nodeView, {}, (m) => nodeViewIn(m.json));
  }

  startProcess(sandboxID: string, req: StartProcessRequest): Promise<ProcessStream> {
    return this.processStream((o) => this.rpc.startProcess(startOut(sandboxID, req), o));
  }
  connectProcess(sandboxID: string, sel: { pid?: number; tag?: string }): Promise<ProcessStream> {
    return this.processStream((o) => this.rpc.connectProcess({ sandboxId: sandboxID, ...sel }, o));
  }
  listProcesses(sandboxID: string): Promise<ProcessInfo[]> {
    return this.unary(NodeService.method.listProcesses, { sandboxId: sandboxID }, (m) => m.processes.map(processInfoIn));
  }
  sendInput(sandboxID: string, pid: number, data: Buffer): Promise<void> {
    return this.unary(NodeService.method.sendInput, { sandboxId: sandboxID, pid, data }, () => undefined);
  }
  closeStdin(sandboxID: string, pid: number): Promise<void> {
    return this.unary(NodeService.method.closeStdin, { sandboxId: sandboxID, pid }, () => undefined);
  }
  signalProcess(sandboxID: string, pid: number, signal: 'SIGKILL' | 'SIGTERM' | 'SIGINT'): Promise<void> {
    return this.unary(NodeService.method.signalProcess, { sandboxId: sandboxID, pid, signal }, () => undefined);
  }
  resizeProcess(sandboxID: string, pid: number, cols: number, rows: number): Promise<void> {
    return this.unary(NodeService.method.resizeProcess, { sandboxId: sandboxID, pid, cols, rows }, () => undefined);
  }
  processOutput(sandboxID: string): Promise<OutputLine[]> {
    return this.unary(NodeService.method.processOutput, { sandboxId: sandboxID }, (m) => m.lines.map(outputLineIn));
  }

  /**
   * The node's volumes: their calls in the schema (NodeVolumes; a node whose runtime holds none
   * refuses them with 422), a file's content as the byte streams volumeRead and volumeWrite.
   */
  get volumes(): VolumeHost {
    return {
      create: (id, sizeBytes) => this.unary(NodeVolumes.method.create, { volumeId: id, sizeBytes }, () => undefined),
      remove: (id) => this.unary(NodeVolumes.method.remove, { volumeId: id }, () => undefined),
      ids: () => this.unary(NodeVolumes.method.ids, {}, (m) => m.volumeIds),
      usedBytes: (id) => this.unary(NodeVolumes.method.usedBytes, { volumeId: id }, (m) => m.bytes),
      dir: () => {
        throw new CubeError('INTERNAL', `a volume's directory is on node ${this.nodeID}, not here`);
      },
      statPath: (id, path) => this.unary(NodeVolumes.method.statPath, { volumeId: id, path }, fileStatIn),
      listDir: (id, path, depth) => this.unary(NodeVolumes.method.listDir, { volumeId: id, path, depth }, (m) => m.files.map(fileStatIn)),
      makeDir: (id, path, opts) => this.unary(NodeVolumes.method.makeDir, { volumeId: id, path, opts: volumeOptionsOut(opts) }, fileStatIn),
      removePath: (id, path) => this.unary(NodeVolumes.method.removePath, { volumeId: id, path }, () => undefined),
      setMetadata: (id, path, meta) => this.unary(NodeVolumes.method.setMetadata, volumeMetadataOut(id, path, meta), fileStatIn),
      readFile: async (id, path) => {
        const res = await this.request('volumeRead', { query: { volumeID: id, path } });
        return Readable.fromWeb(res.body as WebReadableStream<Uint8Array>);
      },
      writeFile: async (id, path, data, opts) => {
        const num = (n: number | undefined) => (n === undefined ? undefined : String(n));
        const res = await this.request('volumeWrite', {
          query: { volumeID: id, path, uid: num(opts.uid), gid: num(opts.gid), mode: num(opts.mode), force: opts.force ? 'true' : undefined },
          body: Buffer.isBuffer(data) ? data : (Readable.toWeb(data) as ReadableStream),
        });
        return fileStatIn(fromBinary(FileStatSchema, new Uint8Array(await res.arrayBuffer())));
      },
    };
  }
  statFile(sandboxID: string, path: string, user?: string): Promise<FileStat> {
    return this.unary(NodeService.method.statFile, { sandboxId: sandboxID, path, ...(user !== undefined ? { user } : {}) }, fileStatIn);
  }
  listDir(sandboxID: string, path: string, depth?: number, user?: string): Promise<FileStat[]> {
    return this.unary(
      NodeService.method.listDir,
      { sandboxId: sandboxID, path, ...(depth !== undefined ? { depth } : {}), ...(user !== undefined ? { user } : {}) },
      (m) => m.files.map(fileStatIn),
    );
  }
  async readFile(sandboxID: string, path: string, user?: string): Promise<Readable> {
    const { first, rest } = await this.stream((o) => this.rpc.readFile({ sandboxId: sandboxID, path, ...(user !== undefined ? { user } : {}) }, o));
    async function* bytes(): AsyncGenerator<Buffer> {
      if (first.done) return;
      yield Buffer.from(first.value.data);
      for await (const c of rest) yield Buffer.from(c.data);
    }
    return Readable.from(bytes(), { objectMode: false });
  }
  async writeFile(sandboxID: string, path: string, data: Readable | Buffer, user?: string): Promise<FileStat> {
    const body = Buffer.isBuffer(data) ? data : Buffer.concat(await data.toArray());
    return this.unary(NodeService.method.writeFile, { sandboxId: sandboxID, path, data: body, ...(user !== undefined ? { user } : {}) }, fileStatIn);
  }
  makeDir(sandboxID: string, path: string, user?: string): Promise<boolean> {
    return this.unary(NodeService.method.makeDir, { sandboxId: sandboxID, path, ...(user !== undefined ? { user } : {}) }, (m) => m.made);
  }
  removePath(sandboxID: string, path: string, user?: string): Promise<void> {
    return this.unary(NodeService.method.removePath, { sandboxId: sandboxID, path, ...(user !== undefined ? { user } : {}) }, () => undefined);
  }
  movePath(sandboxID: string, from: string, to: string, user?: string): Promise<FileStat> {
    return this.unary(NodeService.method.movePath, { sandboxId: sandboxID, from, to, ...(user !== undefined ? { user } : {}) }, fileStatIn);
  }
  readMetadata(sandboxID: string, paths: string[], user?: string): Promise<FileMetadata[]> {
    return this.unary(NodeService.method.readMetadata, { sandboxId: sandboxID, paths, ...(user !== undefined ? { user } : {}) }, (m) =>
      m.metadata.map((x) => x.entries),
    );
  }
  writeMetadata(sandboxID: string, path: string, meta: FileMetadata, user?: string): Promise<void> {
    return this.unary(
      NodeService.method.writeMetadata,
      { sandboxId: sandboxID, path, metadata: { entries: meta }, ...(user !== undefined ? { user } : {}) },
      () => undefined,
    );
  }
  async watchDir(sandboxID: string, req: WatchRequest): Promise<AsyncIterable<FsChange>> {
    const { first, rest, stop } = await this.stream((o) => this.rpc.watchDir({ sandboxId: sandboxID, ...req }, o));
    // The node answers its first message once the watch is set (or an error before it).
    if (first.done) throw new CubeError('NODE_UNREACHABLE', `node ${this.nodeID} closed the watch stream`);
    async function* changes(): AsyncGenerator<FsChange> {
      for await (const m of rest) {
        const c = watchEventIn(m);
        if (c) yield c;
      }
    }
    return stoppable(changes(), stop); // the node's watcher ends with this call
  }

  /** The node's record of template `name` and its layers' tree digests (served with a LayerServer). */
  templateRecord(name: string): Promise<HeldTemplate> {
    return this.unary(NodeTemplates.method.templateRecord, { name }, (m) => fromJsonBytes(m.json) as HeldTemplate);
  }
  /** The node's template records (where a template's children live, for a cluster-wide rm). */
  heldImage(digest: string): Promise<HeldImage> {
    return this.unary(NodeTemplates.method.heldImage, { digest }, (m) => fromJsonBytes(m.json) as HeldImage);
  }

  templateRecords(): Promise<TemplateRecord[]> {
    return this.unary(NodeTemplates.method.templateRecords, {}, (m) => fromJsonBytes(m.json) as TemplateRecord[]);
  }
  /** Removes template `name` from the node's store (409 while one of its sandboxes or templates uses it). */
  removeTemplate(name: string): Promise<TemplateRecord> {
    return this.unary(NodeTemplates.method.removeTemplate, { name }, (m) => fromJsonBytes(m.json) as TemplateRecord);
  }
  /** Adds tags to template `target` in the node's store. */
  tagTemplate(target: string, tags: string[]): Promise<{ from: TemplateRecord; tags: string[] }> {
    return this.unary(NodeTemplates.method.tagTemplate, { target, tags }, (m) => fromJsonBytes(m.json) as { from: TemplateRecord; tags: string[] });
  }
  /** A build on this node (TemplateBuilder.request). */
  buildRequest(req: { name: string; tags?: string[]; cpuCount?: number; memoryMB?: number }): Promise<BuildRecord> {
    return this.unary(NodeTemplates.method.buildRequest, { json: toJsonBytes(req) }, (m) => fromJsonBytes(m.json) as BuildRecord);
  }
  /** Starts the build's steps; waits for no step, but for a base template the node fetches first (no timeout). */
  buildStart(templateID: string, buildID: string, body: unknown, owner?: string): Promise<void> {
    return this.unary(
      NodeTemplates.method.buildStart,
      { templateId: templateID, buildId: buildID, bodyJson: toJsonBytes(body), ...(owner !== undefined ? { owner } : {}) },
      () => undefined,
      false,
    );
  }
  buildGet(templateID: string, buildID: string): Promise<BuildRecord> {
    return this.unary(NodeTemplates.method.buildGet, { templateId: templateID, buildId: buildID }, (m) => fromJsonBytes(m.json) as BuildRecord);
  }
  buildList(templateID: string): Promise<BuildRecord[]> {
    return this.unary(NodeTemplates.method.buildList, { name: templateID }, (m) => fromJsonBytes(m.json) as BuildRecord[]);
  }
  buildHasFiles(hash: string, owner?: string): Promise<boolean> {
    return this.unary(NodeTemplates.method.buildHasFiles, { hash, ...(owner !== undefined ? { owner } : {}) }, (m) => m.has);
  }

  /**
   * A plain route of the node (rpc-server.ts: layers, imports, COPY uploads, a volume file's content), by fetch;
   * `timeout`: bounded by the call timeout (a stream, the default, runs as long as it takes).
   */
  private async request(
    route: string,
    init: { body?: Buffer | string | ReadableStream; query?: Record<string, string | undefined>; contentType?: string; timeout?: boolean },
  ): Promise<Response> {
    // The address may carry a path (one listener serving many simulated nodes): keep it.
    const url = new URL(this.address.replace(/\/+$/, '') + RPC_PREFIX + route);
    for (const [k, v] of Object.entries(init.query ?? {})) if (v !== undefined) url.searchParams.set(k, v);
    let res: Response;
    try {
      res = await fetch(url, {
        method: 'POST',
        headers: { ...this.headers(), 'content-type': init.contentType ?? 'application/octet-stream' },
        // duplex: a streamed body (an import forwarded as it arrives) needs it.
        ...(init.body !== undefined ? ({ body: init.body, duplex: 'half' } as RequestInit) : {}),
        ...(init.timeout === true ? { signal: AbortSignal.timeout(this.timeoutMs) } : {}),
      });
    } catch (e) {
      throw this.unreachable((e as Error).message, e);
    }
    if (res.ok) return res;
    throw await answerError(res, `node ${this.nodeID}`);
  }
  /** Imports the archive `body` into the node's store (the control replica forwarding an upload). */
  async importImage(body: Readable, req: ImportRequest): Promise<TemplateRecord> {
    const res = await this.request('importImage', { query: { import: JSON.stringify(req) }, body: Readable.toWeb(body) as ReadableStream });
    return ((await res.json()) as { result: TemplateRecord }).result;
  }
  /** A COPY step's upload (the SDK's tar), streamed to the node building it. */
  async buildFiles(hash: string, body: Readable, owner?: string): Promise<void> {
    await this.request('buildFiles', { query: { hash, owner }, body: Readable.toWeb(body) as ReadableStream });
  }
  /** Layer `digest` as a tar (layers/pack.ts); the body streams for as long as it takes. */
  async layer(digest: string): Promise<Response> {
    return this.request('layer', { query: { digest } });
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
        for await (const m of this.rpc.events({}, { headers: this.headers(), signal: abort.signal })) {
          const e = nodeEventIn(m);
          if (e) for (const l of this.listeners) l(e);
        }
      } catch {
        // Reopened below; the control plane learns of a dead node from missed heartbeats.
      }
      if (!aborted()) await new Promise((r) => setTimeout(r, 1000));
    }
  }
}
