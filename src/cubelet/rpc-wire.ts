// What travels between the control plane and a compute node (node RPC, HTTP/JSON): the path
// prefix, the shared-secret check, and how values that JSON cannot carry are encoded.
import { timingSafeEqual } from 'node:crypto';
import type { EventView, NodeView, SandboxView } from '../api/types.js';
import type { FileStat } from '../runtime/types.js';
import type { ProcessEvent } from './types.js';

export const RPC_PREFIX = '/node/v1/';

/** Methods whose arguments and result are plain JSON (FileStat dates aside). */
export const JSON_METHODS = [
  'createSandbox',
  'destroySandbox',
  'pauseSandbox',
  'resumeSandbox',
  'getSandbox',
  'listSandboxes',
  'setEndAt',
  'setEgress',
  'snapshotSandbox',
  'deleteSnapshot',
  'listSnapshots',
  'sandboxAddress',
  'listProcesses',
  'closeStdin',
  'signalProcess',
  'resizeProcess',
  'statFile',
  'listDir',
  'makeDir',
  'removePath',
  'movePath',
  'processOutput',
  'readMetadata',
  'writeMetadata',
  'nodeView',
] as const;
export type JsonMethod = (typeof JSON_METHODS)[number];

/** CUBE_CLUSTER_SECRET, else the API key; a cluster without either refuses to start. */
export function clusterSecret(env: NodeJS.ProcessEnv = process.env): string | undefined {
  return env.CUBE_CLUSTER_SECRET || env.CUBE_API_KEY || undefined;
}

export function secretMatches(header: string | undefined, secret: string): boolean {
  const got = Buffer.from(header?.replace(/^Bearer /, '') ?? '');
  const want = Buffer.from(secret);
  return got.length === want.length && timingSafeEqual(got, want);
}

export type WireProcessEvent =
  | { type: 'start'; pid: number }
  | { type: 'stdout' | 'stderr' | 'pty'; data: string }
  | { type: 'end'; exitCode: number; signal?: string; oomKilled: boolean; timedOut: boolean; error?: string };

export function encodeProcessEvent(e: ProcessEvent): WireProcessEvent {
  return e.type === 'stdout' || e.type === 'stderr' || e.type === 'pty' ? { type: e.type, data: e.data.toString('base64') } : e;
}

export function decodeProcessEvent(e: WireProcessEvent): ProcessEvent {
  if (e.type === 'stdout' || e.type === 'stderr' || e.type === 'pty') return { type: e.type, data: Buffer.from(e.data, 'base64') };
  return e as Extract<ProcessEvent, { type: 'start' | 'end' }>;
}

/** JSON turns Dates into strings: bring FileStat.mtime back. */
export function reviveStats<T>(v: T): T {
  const fix = (s: FileStat) => ({ ...s, mtime: new Date(s.mtime) });
  if (Array.isArray(v)) return v.map((x) => (x && typeof x === 'object' && 'mtime' in x ? fix(x as FileStat) : x)) as T;
  if (v && typeof v === 'object' && 'mtime' in v) return fix(v as unknown as FileStat) as T;
  return v;
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

/**
 * What a compute node posts every second: its view (capacity, quota, templates, pool), where
 * its node RPC listens, every sandbox it holds (the control plane reconciles its records
 * against this list) and the notices it emitted since the last accepted heartbeat.
 */
export interface Heartbeat {
  nodeID: string;
  /** http://host:port of the node RPC listener. */
  address: string;
  view: NodeView;
  sandboxes: SandboxView[];
  events: Omit<EventView, 'id'>[];
  /**
   * The node's clock (ms) just before it listed `sandboxes`. A record written from a node answer
   * stamped later (SandboxRecord.nodeAt) is newer than this list. Absent from older nodes.
   */
  at?: number;
}

/** What a heartbeat request carries: one node's heartbeat, or several from a process that stands for many (sim runtime). */
export interface HeartbeatBatch {
  heartbeats: Heartbeat[];
}
