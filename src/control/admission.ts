// Admission rules every ControlPlane applies the same way (role all and cluster): a create
// request resolved against the config's defaults, the 130597 refusal text, the release-ratio
// policy for resume, and the audit trail of operator actions. Pure apart from the audit helpers,
// which only write to the StateStore they are given.
import { SandboxSpecSchema, type MasterConfig } from '../config/schema.js';
import { CubeError, toCubeError } from '../errors.js';
import {
  computeDensity,
  densityParamsFromConfig,
  DensityInputError,
  footprintMiB,
  paramsForNode,
  type DensityParams,
  type SpecShape,
} from '../model/density.js';
import { envVarsProblem } from '../model/env.js';
import { limitAsk } from '../model/limits.js';
import { POOL_EXHAUSTED, type NodeView } from '../model/node.js';
import type { CreateSandboxRequest, SandboxSpecView } from '../model/sandbox.js';
import { listedName } from '../model/template.js';
import { describeRejections, type ScheduleResult } from '../scheduler/pipeline.js';
import { fmt } from '../scheduler/plugin.js';
import type { StateStore } from '../store/types.js';

export interface ResolvedCreate {
  templateID: string;
  cpus: number;
  memoryMiB: number;
  diskGiB: number;
  timeoutSec: number;
}

/** The request with the config's defaults filled in; 400 on an invalid spec or timeout. */
export function resolveCreate(req: CreateSandboxRequest, master: MasterConfig): ResolvedCreate {
  // NAME:latest is listed (and launched) as NAME: the SDK's `Sandbox.create('x:latest')`.
  const templateID = listedName(!req.templateID || req.templateID === 'base' ? master.sandbox.default_template : req.templateID);
  const cpus = req.cpus ?? master.sandbox.default_spec.cpus;
  const memoryMiB = req.memoryMiB ?? master.sandbox.default_spec.memory_mib;
  const diskGiB = req.diskGiB ?? master.sandbox.default_spec.disk_gib;
  const timeoutSec = req.timeoutSec ?? master.sandbox.default_timeout_sec;
  // The bounds of the config's default_spec are the bounds of any spec: one table.
  const spec = SandboxSpecSchema.safeParse({ cpus, memory_mib: memoryMiB, disk_gib: diskGiB });
  if (!spec.success) {
    const bad = spec.error.issues.map(
      (i) => `${i.path.join('.')} ${JSON.stringify({ cpus, memory_mib: memoryMiB, disk_gib: diskGiB }[String(i.path[0])])}: ${i.message}`,
    );
    throw new CubeError('BAD_REQUEST', `invalid spec: ${bad.join('; ')}`);
  }
  checkTimeout(timeoutSec, master, 1);
  if (templateID.length > INPUT_LIMITS.templateIDMax)
    throw new CubeError('BAD_REQUEST', `templateID is ${templateID.length} characters, at most ${INPUT_LIMITS.templateIDMax}`);
  const badEnv = envVarsProblem(req.envVars, 'envVars');
  if (badEnv !== undefined) throw new CubeError('BAD_REQUEST', badEnv);
  checkMetadata(req.metadata);
  const asked = limitAsk(req.metadata);
  if ('problem' in asked) throw new CubeError('BAD_REQUEST', asked.problem);
  return { templateID, cpus, memoryMiB, diskGiB, timeoutSec };
}

export const INPUT_LIMITS = {
  /** The cluster store's template_id column is VARCHAR(128). */
  templateIDMax: 128,
  metadataCount: 64,
  metadataKeyMax: 256,
  metadataValueMax: 4096,
  /** Next to the envVars, in the one 64 KiB TEXT column of the sandbox record. */
  metadataTotalMax: 16 * 1024,
} as const;

/** A lifetime in whole seconds between `min` and sandbox.max_timeout_sec; 400 otherwise. */
export function checkTimeout(sec: number, master: MasterConfig, min = 0): void {
  const max = master.sandbox.max_timeout_sec;
  if (!Number.isInteger(sec) || sec < min || sec > max)
    throw new CubeError('BAD_REQUEST', `timeout must be a whole number of seconds from ${min} to ${max} (sandbox.max_timeout_sec), got ${sec}`);
}

export function checkMetadata(md: Record<string, unknown> | undefined): void {
  if (md === undefined) return;
  const L = INPUT_LIMITS;
  const entries = Object.entries(md);
  if (entries.length > L.metadataCount) throw new CubeError('BAD_REQUEST', `metadata: ${entries.length} keys, at most ${L.metadataCount}`);
  let total = 0;
  for (const [k, v] of entries) {
    if (typeof v !== 'string') throw new CubeError('BAD_REQUEST', `metadata: value of ${JSON.stringify(k.slice(0, 40))} must be a string`);
    if (k.length === 0 || k.length > L.metadataKeyMax)
      throw new CubeError('BAD_REQUEST', `metadata: key of ${k.length} characters, must be 1 to ${L.metadataKeyMax}`);
    if (v.length > L.metadataValueMax)
      throw new CubeError('BAD_REQUEST', `metadata: value of ${JSON.stringify(k.slice(0, 40))} is ${v.length} characters, at most ${L.metadataValueMax}`);
    total += Buffer.byteLength(k) + Buffer.byteLength(v);
  }
  if (total > L.metadataTotalMax) throw new CubeError('BAD_REQUEST', `metadata: ${total} bytes, at most ${L.metadataTotalMax}`);
}

/** 404 unless some node holds the template. */
export function requireTemplate(templateID: string, nodes: NodeView[]): void {
  if (nodes.some((n) => n.templates.includes(templateID))) return;
  const known = [...new Set(nodes.flatMap((n) => n.templates))].sort();
  throw new CubeError('NOT_FOUND', `template ${templateID} not found (available: ${known.join(', ') || 'none'})`);
}

/**
 * 400 when the spec fits on no registered node even empty (more vCPUs than a node's oversold
 * CPU quota, a footprint larger than its memory quota, a disk quota larger than its sandbox
 * store, or above node_max_mvm_num zero): waiting
 * cannot help, so the answer must not say "retry". The message names the limit and its numbers
 * for the largest node. Nodes that are down still count: they may come back.
 */
export function requireFits(spec: SpecShape & { diskGiB?: number }, nodes: NodeView[], master: MasterConfig): void {
  if (nodes.length === 0) return;
  const params = densityParamsFromConfig(master);
  const diskRatio = master.host.quota.disk_oversell_ratio;
  const why: string[] = [];
  for (const n of nodes) {
    const limit = neverFitsOn(spec, n, params) ?? diskNeverFitsOn(spec.diskGiB, n, diskRatio);
    if (limit === undefined) return;
    why.push(`${n.nodeID}: ${limit}`);
  }
  const disk = spec.diskGiB !== undefined ? ` / ${fmt(spec.diskGiB)} GiB disk` : '';
  throw new CubeError(
    'BAD_REQUEST',
    `a sandbox of ${fmt(spec.cpus)} vCPU / ${fmt(spec.memoryMiB)} MiB${disk} can never fit, even on an empty node: ${why.join('; ')}`,
  );
}

/**
 * Why an empty node's sandbox store could never hold a disk quota of `diskGiB`: more than the
 * store's size (oversell or not, one sandbox can never write more than the store holds), or more
 * than its size x disk_oversell_ratio when that ratio is below 1. Undefined when it could, or the
 * node has no store.
 */
export function diskNeverFitsOn(diskGiB: number | undefined, node: NodeView, ratio: number): string | undefined {
  const bytes = node.usage.store?.sizeBytes;
  if (diskGiB === undefined || bytes === undefined) return undefined;
  const size = bytes / 1024 ** 3;
  const limit = size * Math.min(1, ratio);
  if (diskGiB <= limit + 1e-9) return undefined;
  return ratio < 1
    ? `disk ${fmt(diskGiB)} GiB > ${fmt(limit)} GiB (sandbox store ${fmt(size)} GiB x ${fmt(ratio)} disk oversell)`
    : `disk ${fmt(diskGiB)} GiB > sandbox store ${fmt(size)} GiB`;
}

/** Why an empty node could not hold one sandbox of `spec`, or undefined when it could. */
export function neverFitsOn(spec: SpecShape, node: NodeView, params: DensityParams): string | undefined {
  let d;
  try {
    d = computeDensity(node.capacity, params, spec);
  } catch (e) {
    if (e instanceof DensityInputError) return e.message;
    throw e;
  }
  const p = paramsForNode(node.capacity, params);
  if (d.cpuCeiling < 1)
    return `${fmt(spec.cpus)} vCPU > cpu quota ${fmt(d.cpuQuota)} (${fmt(node.capacity.cpus)} cpus x ${fmt(p.cpuOversellRatio)} cpu oversell x ${fmt(p.cpuUtilCapPercent)}% node_max_cpu_util)`;
  if (d.paperCeiling < 1)
    return `footprint ${fmt(d.footprintMiB)} MiB > memory quota ${fmt(d.memQuotaMiB)} MiB ((${fmt(node.capacity.memoryMiB)} - ${fmt(p.memReservedMiB)} reserved) x ${fmt(p.memOversellRatio)} mem oversell)`;
  return undefined;
}

/**
 * The error for a refused placement. Every node only short of create slots (realtime_create_num):
 * 429 with Retry-After, which the E2B SDK retries by itself; every node refusing raw sockets
 * (net_raw): 403, 130436, as the node itself says it; otherwise 130597 (503, Retry-After:
 * capacity comes back as sandboxes end or their CPU use drops; the SDK raises ServiceBusyError).
 */
export function refusalError(placed: ScheduleResult, message: string): CubeError {
  const only = (filter: string) => !placed.ok && placed.rejections.length > 0 && placed.rejections.every((r) => r.filter === filter);
  if (only('realtime_create_num')) return new CubeError('CONCURRENCY_LIMITED', message, { retryAfter: 1 });
  // Not a wait: no node will take it until an operator allows it somewhere.
  if (only('net_raw') && !placed.ok)
    return new CubeError('NET_RAW_FORBIDDEN', `cube.net_raw=true: no node allows raw sockets: ${describeRejections(placed.rejections)}`);
  return new CubeError('NO_NODE', message, { retryAfter: 1 });
}

/**
 * The 130597 message when the pipeline placed nothing, or placed on a node whose pool is
 * exhausted (the pipeline does not see pool levels); undefined when the placement stands.
 */
export function refusalOf(placed: ScheduleResult, nodes: NodeView[]): string | undefined {
  if (!placed.ok) return `no node available: ${describeRejections(placed.rejections)}`;
  const node = nodes.find((n) => n.nodeID === placed.nodeID);
  return node?.reason === POOL_EXHAUSTED ? `no node available: ${node.nodeID}: ${POOL_EXHAUSTED}` : undefined;
}

/** The rule behind a refused placement, for counting refusals by rule: the first node's filter, or the pool. */
export function refusalRule(placed: ScheduleResult): string {
  return placed.ok ? 'pool' : (placed.rejections[0]?.filter ?? 'no node');
}

/**
 * A paused sandbox holds (1 - r) of its footprint; resuming takes back the r share, which must
 * fit in the node's memory quota next to what is in use. The 130409 message, or undefined.
 */
export function resumeRefusal(spec: SandboxSpecView, node: NodeView, master: MasterConfig): string | undefined {
  const params = densityParamsFromConfig(master);
  const need = footprintMiB(spec, params) * params.releaseRatio;
  const used = node.usage.quotaMemUsedMiB;
  const quota = computeDensity(node.capacity, params, spec).memQuotaMiB;
  if (need + used <= quota + 1e-9) return undefined;
  const r0 = (x: number) => Math.round(x);
  return `resume rejected by paused_resource_release_ratio policy: need ${r0(need)}MB + used ${r0(used)}MB > mem quota ${r0(quota)}MB`;
}

/** One audit record: who (API key id or 'system'), what, on what, and how it ended. */
export async function audit(
  store: StateStore,
  actor: string | undefined,
  action: string,
  target: string,
  outcome: string,
  detail?: Record<string, unknown>,
): Promise<void> {
  await store.appendAudit({ at: new Date().toISOString(), actor: actor ?? 'system', action, target, outcome, ...(detail ? { detail } : {}) });
}

/** Runs `fn` and audits its outcome (the error message when it throws, which is rethrown); an audit the store refuses is left out. */
export async function audited<T>(
  store: StateStore,
  actor: string | undefined,
  action: string,
  target: string,
  fn: () => Promise<T>,
  detail?: Record<string, unknown>,
): Promise<T> {
  let r: T;
  try {
    r = await fn();
  } catch (e) {
    // The operation's own error is the answer, not the audit's (a refusal stays a refusal).
    await audit(store, actor, action, target, toCubeError(e).message, detail).catch(() => undefined);
    throw e;
  }
  // Done is done: an audit row the store could not take (it went away just after the operation)
  // must not turn the answer into an error, which says "not done" (issue 24: a delete answered 503
  // whose sandbox was gone, its retry 404). The operation's own writes are its record.
  await audit(store, actor, action, target, 'ok', detail).catch(() => undefined);
  return r;
}
