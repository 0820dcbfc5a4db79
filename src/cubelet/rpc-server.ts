// Serves a NodeApi (the node's Cubelet) to control planes: the node API's Connect services
// (proto/node/cube/node/v1/node.proto) through @connectrpc/connect-node (binary unary calls, the
// control's, through node-unary.ts: the same protocol, less per call), and beside them the byte
// streams protobuf adds nothing to: layers, image imports, COPY uploads and a volume file's
// content (volumeRead, volumeWrite) under /node/v1/, and
// the port proxy (/node/v1/proxy/<sandboxID>/<port>/..., any method and upgrades) to the
// sandboxes' addresses, which only this node reaches. Every request carries the cluster secret.
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { create, toBinary } from '@bufbuild/protobuf';
import type { HandlerContext, Interceptor, ServiceImpl } from '@connectrpc/connect';
import { connectNodeAdapter } from '@connectrpc/connect-node';
import { sendError, sendJson, type ErrorLog } from '../http.js';
import { proxyHttp, proxyUpgrade, rejectUpgrade } from './port-proxy.js';
import { CubeError, errorBody, toCubeError } from '../errors.js';
import type { LayerServer } from '../templates/fetch.js';
import { underFence, type FenceBook } from './fences.js';
import type { TemplateBuilder } from '../templates/build/build.js';
import {
  AT_HEADER,
  checkDeadline,
  DEADLINE_HEADER,
  FENCE_HEADER,
  parseProxyPath,
  PROXY_SECRET_HEADER,
  RPC_PREFIX,
  secretMatches,
  type ImportRequest,
} from './rpc-wire.js';
import type { NodeApi, PortUpstream } from './types.js';
import type { VolumeHost } from '../runtime/types.js';
import { sameTemplate } from '../model/template.js';
import { FileStatSchema, NodeService, NodeTemplates, NodeVolumes } from './gen/cube/node/v1/node_pb.js';
import {
  createIn,
  egressIn,
  fileStatOut,
  fromJsonBytes,
  nodeErrorOut,
  nodeEventOut,
  outputLineOut,
  processEventOut,
  processInfoOut,
  sandboxOut,
  snapshotOut,
  startIn,
  toJsonBytes,
  usageOut,
  volumeMetadataIn,
  volumeOptionsIn,
} from './node-wire.js';
import { serveUnary, unaryRoutes } from './node-unary.js';

type Handler = (req: IncomingMessage, res: ServerResponse) => void;

/** A file upload (WriteFile) is one message: the cap a file had on the JSON wire, and room for the rest. */
const MAX_MESSAGE = (1 << 30) + (1 << 20);

/** Where the node API's services answer (/cube.node.v1.NodeService/CreateSandbox, ...). */
const API_PREFIX = `/${NodeService.typeName.split('.').slice(0, -1).join('.')}.`;

const SIGNALS = ['SIGKILL', 'SIGTERM', 'SIGINT'] as const;

/**
 * `fences`: the node's FenceBook (the highest lock fence accepted per sandbox, kept across restarts).
 * `layers`: the node's templates and layers, served to the nodes fetching them through the control plane (templates/fetch.ts).
 * `builds`: the node's template builder, which control replicas hand builds to (templates/cluster.ts).
 */
export function nodeRpcHandler(node: NodeApi, secret: string, fences: FenceBook, log?: ErrorLog, layers?: LayerServer, builds?: TemplateBuilder): Handler {
  const services = nodeService(node, fences);
  const templates = templatesService(node, layers, builds);
  const volumes = volumesService(node);
  const connect = connectNodeAdapter({
    routes: (router) => {
      router.service(NodeService, services);
      router.service(NodeTemplates, templates);
      router.service(NodeVolumes, volumes);
    },
    interceptors: [nodeErrors(log), cubeHeaders(secret)],
    readMaxBytes: MAX_MESSAGE,
  });
  // Unary calls in binary protobuf (what RemoteNode sends) skip the adapter (node-unary.ts says why).
  const unary = new Map([...unaryRoutes(NodeService, services), ...unaryRoutes(NodeTemplates, templates), ...unaryRoutes(NodeVolumes, volumes)]);
  const fast = {
    maxBytes: MAX_MESSAGE,
    check: (req: IncomingMessage, method: string) => checkCall(secret, method, (h) => req.headers[h]),
    header: [FENCE_HEADER],
    answerHeaders: () => ({ [AT_HEADER]: String(Date.now()) }),
    failed: (e: unknown) => {
      if (log && toCubeError(e).http >= 500) log.error({ err: e }, 'node API call failed');
    },
  };

  async function streams(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const proxied = await portTarget(node, secret, req);
    if (proxied) return proxyHttp(req, res, proxied.sandboxID, proxied.up.port, proxied.up);
    if (!secretMatches(req.headers.authorization, secret)) throw new CubeError('UNAUTHORIZED', 'node RPC needs the cluster secret (CUBE_CLUSTER_SECRET)');
    const url = new URL(req.url ?? '/', 'http://node');
    const q = (k: string) => url.searchParams.get(k) ?? undefined;
    const route = url.pathname.startsWith(RPC_PREFIX) ? url.pathname.slice(RPC_PREFIX.length) : undefined;
    if (layers && route === 'layer') {
      const tar = layers.packedLayer(q('digest') ?? '');
      res.writeHead(200, { 'content-type': 'application/x-tar' });
      // An error mid-layer cuts the answer short: the fetching node's check fails on it.
      await pipeline(tar, res).catch((err: unknown) => {
        log?.error({ err, digest: q('digest') }, 'serving a layer failed');
        res.destroy();
      });
      return;
    }
    if (builds && route === 'buildFiles') {
      await builds.putFiles(q('hash') ?? '', req, q('owner'));
      return sendJson(res, 201, { result: null });
    }
    if (layers && route === 'importImage')
      return sendJson(res, 201, { result: await layers.importUpload(req, JSON.parse(q('import') ?? '{}') as ImportRequest) });
    // A volume file's content, raw both ways; a write streams to the volume, which stops it at its quota.
    const need = (k: string): string => {
      const v = q(k);
      if (v === undefined) throw new CubeError('BAD_REQUEST', `${route}: ${k} is missing`);
      return v;
    };
    if (route === 'volumeRead') {
      const body = await volumeHost(node).readFile(need('volumeID'), need('path'));
      res.writeHead(200, { 'content-type': 'application/octet-stream' });
      return pipeline(body, res);
    }
    if (route === 'volumeWrite') {
      const num = (k: string) => (q(k) === undefined ? {} : { [k]: Number(q(k)) });
      const opts = { ...num('uid'), ...num('gid'), ...num('mode'), ...(q('force') === 'true' ? { force: true } : {}) };
      const stat = toBinary(FileStatSchema, create(FileStatSchema, fileStatOut(await volumeHost(node).writeFile(need('volumeID'), need('path'), req, opts))));
      res.writeHead(200, { 'content-type': 'application/proto', 'content-length': stat.byteLength });
      return void res.end(stat);
    }
    throw new CubeError('NOT_FOUND', `no node route ${url.pathname}`);
  }

  return (req, res) => {
    const route = req.method === 'POST' && req.headers['content-type'] === 'application/proto' ? unary.get(req.url ?? '') : undefined;
    if (route) void serveUnary(route, req, res, fast);
    else if (req.url?.startsWith(API_PREFIX)) connect(req, res);
    // Not a node API call: a byte stream or the port proxy, else 404.
    else streams(req, res).catch((e: unknown) => sendError(res, e, 'admin', log));
  };
}

/** Handlers throw CubeErrors: each reaches the caller with its code (node-wire.ts nodeErrorOut), before or during a stream. */
function nodeErrors(log?: ErrorLog): Interceptor {
  const out = (e: unknown) => {
    if (log && toCubeError(e).http >= 500) log.error({ err: e }, 'node API call failed');
    return nodeErrorOut(e);
  };
  async function* inStream<T>(messages: AsyncIterable<T>): AsyncIterable<T> {
    try {
      yield* messages;
    } catch (e) {
      throw out(e);
    }
  }
  return (next) => async (req) => {
    try {
      const res = await next(req);
      return res.stream ? { ...res, message: inStream(res.message) } : res;
    } catch (e) {
      throw out(e);
    }
  };
}

/**
 * The cluster secret on every call; the caller's deadline (DEADLINE_HEADER) before the call runs;
 * the node's clock once a unary call is done (AT_HEADER), which the control plane orders the
 * node's later heartbeat lists against (rpc-wire.ts Heartbeat.at).
 */
function cubeHeaders(secret: string): Interceptor {
  return (next) => async (req) => {
    checkCall(secret, req.method.localName, (h) => req.header.get(h) ?? undefined);
    const res = await next(req);
    if (!res.stream) res.header.set(AT_HEADER, String(Date.now()));
    return res;
  };
}

/** Refuses a call without the cluster secret, or reaching the node after its caller's deadline (DEADLINE_HEADER). */
function checkCall(secret: string, method: string, header: (name: string) => string | string[] | undefined): void {
  const auth = header('authorization');
  if (!secretMatches(Array.isArray(auth) ? auth[0] : auth, secret))
    throw new CubeError('UNAUTHORIZED', 'node RPC needs the cluster secret (CUBE_CLUSTER_SECRET)');
  checkDeadline(method, header(DEADLINE_HEADER));
}

/** The NodeApi behind the NodeService; fenced calls go through the node's FenceBook (FENCE_HEADER). */
function nodeService(node: NodeApi, fences: FenceBook): ServiceImpl<typeof NodeService> {
  const fenced = <T>(ctx: HandlerContext, method: keyof NodeApi, sandboxID: string, call: () => Promise<T>): Promise<T> =>
    underFence(fences, method, sandboxID, ctx.requestHeader.get(FENCE_HEADER) ?? undefined, call);
  return {
    createSandbox: async (m) => sandboxOut(await node.createSandbox(createIn(m))),
    destroySandbox: async (m, ctx) => {
      await fenced(ctx, 'destroySandbox', m.sandboxId, () => node.destroySandbox(m.sandboxId));
      return {};
    },
    pauseSandbox: async (m, ctx) =>
      sandboxOut(
        await fenced(ctx, 'pauseSandbox', m.sandboxId, () => node.pauseSandbox(m.sandboxId, m.release === undefined ? undefined : { release: m.release })),
      ),
    resumeSandbox: async (m, ctx) => sandboxOut(await fenced(ctx, 'resumeSandbox', m.sandboxId, () => node.resumeSandbox(m.sandboxId))),
    getSandbox: async (m) => {
      const v = await node.getSandbox(m.sandboxId);
      return v ? { sandbox: sandboxOut(v) } : {};
    },
    listSandboxes: async () => ({ sandboxes: (await node.listSandboxes()).map(sandboxOut) }),
    setEndAt: async (m, ctx) => sandboxOut(await fenced(ctx, 'setEndAt', m.sandboxId, () => node.setEndAt(m.sandboxId, m.endAt))),
    setEgress: async (m, ctx) => sandboxOut(await fenced(ctx, 'setEgress', m.sandboxId, () => node.setEgress(m.sandboxId, m.egress ? egressIn(m.egress) : {}))),
    snapshotSandbox: async (m) => snapshotOut(await node.snapshotSandbox(m.sandboxId, m.snapshotId)),
    deleteSnapshot: async (m) => {
      await node.deleteSnapshot(m.snapshotId);
      return {};
    },
    listSnapshots: async () => ({ snapshotIds: await node.listSnapshots() }),
    sandboxAddress: async (m) => ({ address: await node.sandboxAddress(m.sandboxId) }),
    sandboxUsage: async () => ({ usage: ((await node.sandboxUsage?.()) ?? []).map(usageOut) }),
    nodeView: async () => ({ json: toJsonBytes(await node.nodeView()) }),
    async *events(_m, ctx) {
      // Queued between the node's listener and the stream; the caller hanging up unsubscribes.
      const queue: ReturnType<typeof nodeEventOut>[] = [];
      let wake: (() => void) | undefined;
      const off = node.subscribe((e) => {
        queue.push(nodeEventOut(e));
        wake?.();
      });
      const ended = new Promise<void>((r) => ctx.signal.addEventListener('abort', () => r(), { once: true }));
      try {
        while (!ctx.signal.aborted) {
          while (queue.length > 0) yield queue.shift()!;
          await Promise.race([new Promise<void>((r) => (wake = r)), ended]);
        }
      } finally {
        off();
      }
    },

    async *startProcess(m) {
      const p = await node.startProcess(m.sandboxId, startIn(m));
      for await (const e of p.events) yield processEventOut(e);
    },
    async *connectProcess(m) {
      const p = await node.connectProcess(m.sandboxId, { ...(m.pid !== undefined ? { pid: m.pid } : {}), ...(m.tag !== undefined ? { tag: m.tag } : {}) });
      for await (const e of p.events) yield processEventOut(e);
    },
    listProcesses: async (m) => ({ processes: (await node.listProcesses(m.sandboxId)).map(processInfoOut) }),
    sendInput: async (m) => {
      await node.sendInput(m.sandboxId, m.pid, Buffer.from(m.data));
      return {};
    },
    closeStdin: async (m) => {
      await node.closeStdin(m.sandboxId, m.pid);
      return {};
    },
    signalProcess: async (m) => {
      const signal = SIGNALS.find((s) => s === m.signal);
      if (!signal) throw new CubeError('BAD_REQUEST', `node API: signal "${m.signal}" is none of ${SIGNALS.join(', ')}`);
      await node.signalProcess(m.sandboxId, m.pid, signal);
      return {};
    },
    resizeProcess: async (m) => {
      await node.resizeProcess(m.sandboxId, m.pid, m.cols, m.rows);
      return {};
    },
    processOutput: async (m) => ({ lines: (await node.processOutput(m.sandboxId)).map(outputLineOut) }),

    statFile: async (m) => fileStatOut(await node.statFile(m.sandboxId, m.path, m.user)),
    listDir: async (m) => ({ files: (await node.listDir(m.sandboxId, m.path, m.depth, m.user)).map(fileStatOut) }),
    async *readFile(m) {
      for await (const chunk of (await node.readFile(m.sandboxId, m.path, m.user)) as AsyncIterable<Buffer>) yield { data: chunk };
    },
    writeFile: async (m) => fileStatOut(await node.writeFile(m.sandboxId, m.path, Buffer.from(m.data.buffer, m.data.byteOffset, m.data.byteLength), m.user)),
    makeDir: async (m) => ({ made: await node.makeDir(m.sandboxId, m.path, m.user) }),
    removePath: async (m) => {
      await node.removePath(m.sandboxId, m.path, m.user);
      return {};
    },
    movePath: async (m) => fileStatOut(await node.movePath(m.sandboxId, m.from, m.to, m.user)),
    readMetadata: async (m) => ({ metadata: (await node.readMetadata(m.sandboxId, m.paths, m.user)).map((entries) => ({ entries })) }),
    writeMetadata: async (m) => {
      await node.writeMetadata(m.sandboxId, m.path, m.metadata?.entries ?? {}, m.user);
      return {};
    },
    async *watchDir(m, ctx) {
      const changes = await node.watchDir(m.sandboxId, { path: m.path, recursive: m.recursive, ...(m.user !== undefined ? { user: m.user } : {}) });
      yield { event: { case: 'ready', value: true } };
      // The caller hanging up ends the watch at once, however quiet the directory.
      const it = changes[Symbol.asyncIterator]();
      const stop = () => void it.return?.();
      ctx.signal.addEventListener('abort', stop, { once: true });
      try {
        for (let r = await it.next(); !r.done && !ctx.signal.aborted; r = await it.next())
          yield { event: { case: 'change', value: { type: r.value.type, name: r.value.name } } };
      } finally {
        ctx.signal.removeEventListener('abort', stop);
        stop();
      }
    },
  };
}

/** The node's template store and builder behind NodeTemplates; a node without them (sim) answers 404. */
function templatesService(node: NodeApi, layers?: LayerServer, builds?: TemplateBuilder): ServiceImpl<typeof NodeTemplates> {
  const store = (): LayerServer => layers ?? missing('a template store');
  const builder = (): TemplateBuilder => builds ?? missing('a template builder');
  const json = (v: unknown) => ({ json: toJsonBytes(v) });
  return {
    fetchProgress: () => store().fetchProgress(),
    templateRecord: async (m) => json(await store().heldTemplate(m.name)),
    templateRecords: async () => json(await store().listRecords()),
    heldImage: async (m) => json(await store().heldImage(m.digest)),
    removeTemplate: async (m) => {
      // The replica checked the cluster's sandboxes; the node checks its own again (a create may have come since).
      const inUse = async (ref: string) =>
        (await node.listSandboxes()).filter((s) => s.state !== 'gone' && sameTemplate(s.templateID, ref)).map((s) => s.sandboxID);
      return json(await store().removeTemplate(m.name, (rec) => inUse(rec.ref)));
    },
    tagTemplate: async (m) => json(await store().tagTemplate(m.target, m.tags)),
    buildRequest: (m) => json(builder().request(fromJsonBytes(m.json) as Parameters<TemplateBuilder['request']>[0])),
    buildStart: async (m) => {
      await builder().start(m.templateId, m.buildId, fromJsonBytes(m.bodyJson), m.owner);
      return {};
    },
    buildGet: (m) => json(builder().get(m.templateId, m.buildId)),
    buildList: (m) => json(builder().list(m.name)),
    buildHasFiles: (m) => ({ has: builder().hasFiles(m.hash, m.owner) }),
  };
}

/** The node's volumes behind NodeVolumes; each call is refused with 422 (130433) on a node whose runtime holds none. */
function volumesService(node: NodeApi): ServiceImpl<typeof NodeVolumes> {
  const host = () => volumeHost(node);
  return {
    create: async (m) => {
      await host().create(m.volumeId, m.sizeBytes);
      return {};
    },
    remove: async (m) => {
      await host().remove(m.volumeId);
      return {};
    },
    ids: async () => ({ volumeIds: await host().ids() }),
    usedBytes: async (m) => {
      const bytes = await host().usedBytes(m.volumeId);
      return bytes === undefined ? {} : { bytes };
    },
    statPath: async (m) => fileStatOut(await host().statPath(m.volumeId, m.path)),
    listDir: async (m) => ({ files: (await host().listDir(m.volumeId, m.path, m.depth)).map(fileStatOut) }),
    makeDir: async (m) => fileStatOut(await host().makeDir(m.volumeId, m.path, volumeOptionsIn(m.opts))),
    removePath: async (m) => {
      await host().removePath(m.volumeId, m.path);
      return {};
    },
    setMetadata: async (m) => fileStatOut(await host().setMetadata(m.volumeId, m.path, volumeMetadataIn(m))),
  };
}

function volumeHost(node: NodeApi): VolumeHost {
  if (!node.volumes) throw new CubeError('VOLUME_RUNTIME', 'this node holds no volumes: its runtime has none (volumes need the ns runtime)');
  return node.volumes;
}

function missing(what: string): never {
  throw new CubeError('NOT_FOUND', `this node has no ${what}`);
}

/** A port-proxy request: its sandbox and where to forward (the sandbox's address); undefined for other node RPC. */
async function portTarget(node: NodeApi, secret: string, req: IncomingMessage): Promise<{ sandboxID: string; up: PortUpstream } | undefined> {
  const t = parseProxyPath(req.url ?? '/');
  if (!t) return undefined;
  const got = req.headers[PROXY_SECRET_HEADER];
  if (!secretMatches(Array.isArray(got) ? got[0] : got, secret))
    throw new CubeError('UNAUTHORIZED', `the port proxy needs the cluster secret in ${PROXY_SECRET_HEADER}`);
  return { sandboxID: t.sandboxID, up: { host: await node.sandboxAddress(t.sandboxID), port: t.port, path: t.path, headers: {} } };
}

/** Upgrades (WebSocket and the like) through the node's port proxy; anything else is refused. */
export function nodeUpgradeHandler(node: NodeApi, secret: string): (req: IncomingMessage, socket: Duplex, head: Buffer) => void {
  return (req, socket, head) => {
    portTarget(node, secret, req)
      .then((t) => {
        if (!t) throw new CubeError('NOT_FOUND', `no upgrade route ${(req.url ?? '/').split('?', 1)[0]}`);
        proxyUpgrade(req, socket, head, t.sandboxID, t.up.port, t.up);
      })
      .catch((e: unknown) => {
        const err = toCubeError(e);
        rejectUpgrade(socket, err.http, errorBody(err, 'admin'));
      });
  };
}
