// What travels between the control plane and a compute node beside the node API's messages
// (proto/node/cube/node/v1/node.proto, node-wire.ts): the headers every node call carries, the
// shared-secret check, the byte-stream routes and port proxy, and the heartbeats nodes post.
import { timingSafeEqual } from 'node:crypto';
import type { MasterConfig } from '../config/schema.js';
import { CubeError } from '../errors.js';
import { eventWithEpochTime, type EventView } from '../model/event.js';
import { nodeWithEpochTimes, type NodeView } from '../model/node.js';
import { withEpochTimes, type SandboxView } from '../model/sandbox.js';
import { epochMs } from '../model/time.js';
import type { TemplateConfig } from '../runtime/types.js';
import type { NodeApi } from './types.js';

/** The node's byte-stream routes (layers, imports, COPY uploads) and its port proxy live under it. */
export const RPC_PREFIX = '/node/v1/';

/**
 * The fencing token of the control plane's per-sandbox operation lock, on calls that change a
 * sandbox (FENCED_METHODS): a node refuses a call whose token is lower than one it has already
 * accepted for that sandbox (130491), so a replica that stalled past its lease cannot act after
 * the next holder did. Calls without one (the create path, which holds no lock) pass. Role all's
 * in-process node is held to the same rule by the same check (fences.ts underFence).
 */
export const FENCE_HEADER = 'x-cube-fence';
export const FENCED_METHODS: ReadonlySet<string> = new Set<keyof NodeApi>(['destroySandbox', 'pauseSandbox', 'resumeSandbox', 'setEndAt', 'setEgress']);

/**
 * The caller's deadline (epoch ms) on a create and on fenced calls: the node refuses a call that
 * reaches it after it (130596), so a call the caller gave up on (the node was frozen and read it
 * when it woke) is never carried out late: the caller's error said "not done", and stays true.
 * Control and nodes compare wall clocks here: keep them in sync (NTP).
 */
export const DEADLINE_HEADER = 'x-cube-deadline';

/**
 * On a unary node API answer: the node's clock (epoch ms) once the call was done. The control
 * plane orders the node's later heartbeat lists against it (Heartbeat.at, remote.ts answeredAt).
 */
export const AT_HEADER = 'x-cube-at';

/** Refuses a call that reached the node after the caller's deadline (DEADLINE_HEADER). */
export function checkDeadline(method: string, deadline: string | string[] | undefined, now = Date.now()): void {
  const d = Number(Array.isArray(deadline) ? deadline[0] : deadline);
  if (deadline === undefined || !Number.isFinite(d) || now <= d) return;
  throw new CubeError(
    'NODE_UNREACHABLE',
    `${method} reached the node ${((now - d) / 1000).toFixed(1)} s after its caller's deadline (the node was frozen or overloaded): refused, not done`,
  );
}

/** CUBE_CLUSTER_SECRET, else the API key; a cluster without either refuses to start. */
export function clusterSecret(env: NodeJS.ProcessEnv = process.env): string | undefined {
  return env.CUBE_CLUSTER_SECRET || env.CUBE_API_KEY || undefined;
}

export function secretMatches(header: string | undefined, secret: string): boolean {
  const got = Buffer.from(header?.replace(/^Bearer /, '') ?? '');
  const want = Buffer.from(secret);
  return got.length === want.length && timingSafeEqual(got, want);
}

/**
 * The node's port proxy: <RPC_PREFIX>proxy/<sandboxID>/<port><path>, plain HTTP and upgrades.
 * The secret travels in its own header: Authorization belongs to the proxied request.
 */
export const PROXY_SECRET_HEADER = 'x-cube-cluster-secret';
const PROXY_PREFIX = `${RPC_PREFIX}proxy/`;

export function proxyPath(sandboxID: string, port: number, path: string): string {
  return `${PROXY_PREFIX}${encodeURIComponent(sandboxID)}/${port}${path.startsWith('/') ? path : `/${path}`}`;
}

/** The sandbox, port and path of a port-proxy request target; undefined when it is not one (pure). */
export function parseProxyPath(target: string): { sandboxID: string; port: number; path: string } | undefined {
  if (!target.startsWith(PROXY_PREFIX)) return undefined;
  const m = /^([^/?]+)\/(\d{1,5})(\/.*|\?.*)?$/.exec(target.slice(PROXY_PREFIX.length));
  const port = Number(m?.[2]);
  if (!m || !(port >= 1 && port <= 65535)) return undefined;
  const rest = m[3] ?? '/';
  return { sandboxID: decodeURIComponent(m[1]!), port, path: rest.startsWith('?') ? `/${rest}` : rest };
}

/** Where compute nodes post their heartbeats on a control replica (same secret as node RPC). */
export const HEARTBEAT_PATH = '/cluster/v1/heartbeat';
/** Where a compute node asks a control replica for a template's record ({name, nodeID}) and for a layer ({digest, nodeID, holder?: the node to ask first}, a tar). */
export const CLUSTER_TEMPLATE_PATH = '/cluster/v1/template';
export const CLUSTER_LAYER_PATH = '/cluster/v1/layer';
/**
 * Where a compute node asks, before it pulls a registry image, whether a node holds it
 * ({digest, nodeID}: templates/relay.ts image), and keeps or drops its pull lease ({digest, nodeID, lease: 'renew' | 'release'}).
 */
export const CLUSTER_IMAGE_PATH = '/cluster/v1/image';
/** The answer header naming the node a relayed layer comes from. */
export const HOLDER_HEADER = 'x-cube-holder';

/** An import a control replica forwards to a node (node RPC `importImage`: the archive as the body, this as the `import` query parameter in JSON). */
export interface ImportRequest {
  ref: string;
  config?: Partial<TemplateConfig>;
}

/**
 * What a compute node posts every second: where its node RPC listens, its view (capacity, quota,
 * templates, pool) and every sandbox it holds (the control plane reconciles its records against
 * this list), each only when it changed, and the notices it emitted since the last accepted
 * heartbeat. At 1000 nodes, carrying and storing every view every second was 17-22% of a core in
 * the control (docs/benchmarks.md).
 */
export interface Heartbeat {
  nodeID: string;
  /** http://host:port of the node RPC listener. */
  address: string;
  /**
   * The node's view; omitted when it is what the last accepted heartbeat carried (lastSeen
   * aside), or it was asked for (HeartbeatAnswer.resend). Without it `seen` says when.
   */
  view?: NodeView;
  /** With no view: the node's clock now (the view's lastSeen) and the config version it runs. */
  seen?: { lastSeen: number; configVersion?: number };
  /**
   * Every sandbox the node holds; omitted when the list is what the last accepted heartbeat
   * carried and it was sent less than SANDBOX_LIST_REFRESH_MS ago (the control reconciles with
   * each list it gets: a record changed on the control's side waits for the next one).
   */
  sandboxes?: SandboxView[];
  /** Numbered per `sender` (seq): a heartbeat sent again after its answer was lost does not append them twice. */
  events: NodeNotice[];
  /** Who numbered the events: one per sending process and start. */
  sender?: string;
  /**
   * The node's clock (ms) just before it listed `sandboxes`. A record written from a node answer
   * stamped later (SandboxRecord.nodeAt) is newer than this list. Absent from older nodes.
   */
  at?: number;
}

/** A node's notice on the wire: `seq` increases per heartbeat sender. */
export type NodeNotice = Omit<EventView, 'id'> & { seq?: number };

/** A node's unchanged sandbox list is sent again at least this often (spread: 0.5-1.5x per node). */
export const SANDBOX_LIST_REFRESH_MS = 10_000;

/**
 * A heartbeat as the control takes it: a node of the version before numeric times sends its view's
 * lastSeen, `seen.lastSeen`, its sandboxes' and its notices' times as ISO 8601, read as epoch ms. The same objects
 * where they are numbers already (1000 nodes' heartbeats a second go through here).
 */
export function heartbeatWithEpochTimes(hb: Heartbeat): Heartbeat {
  const seen = hb.seen as { lastSeen: number | string; configVersion?: number } | undefined;
  const iso = (t: unknown) => typeof t === 'string';
  const old = iso(seen?.lastSeen) || iso(hb.view?.lastSeen) || hb.sandboxes?.some((s) => iso(s.startedAt) || iso(s.endAt)) || hb.events.some((e) => iso(e.at));
  if (!old) return hb;
  return {
    ...hb,
    ...(hb.view ? { view: nodeWithEpochTimes(hb.view) } : {}),
    ...(seen ? { seen: { ...seen, lastSeen: epochMs(seen.lastSeen) } } : {}),
    ...(hb.sandboxes ? { sandboxes: hb.sandboxes.map(withEpochTimes) } : {}),
    events: hb.events.map(eventWithEpochTime),
  };
}

/** The time a heartbeat was taken (pure). */
export function heartbeatSeen(hb: Heartbeat): { lastSeen: number; configVersion?: number } | undefined {
  return hb.view ? { lastSeen: hb.view.lastSeen, ...(hb.view.configVersion !== undefined ? { configVersion: hb.view.configVersion } : {}) } : hb.seen;
}

/** What a heartbeat request carries: one node's heartbeat, or several from a process that stands for many (sim runtime). */
export interface HeartbeatBatch {
  heartbeats: Heartbeat[];
}

/**
 * The control replica's answer: with `config` when a heartbeat's view ran another version than
 * the cluster's (NodeView.configVersion). The node puts its policy (the master section:
 * oversell and release ratios, limits) in force over its own cubemaster.yaml; its cubelet.toml
 * (node id, data dir, declared capacity, network range) stays its own.
 */
export interface HeartbeatAnswer {
  ok: true;
  config?: { version: number; master: MasterConfig };
  /**
   * Nodes whose view the control does not hold (new, expired, or the store restarted empty), or
   * whose list it wants now (a node back after it was marked lost): they send both next time.
   */
  resend?: string[];
}
