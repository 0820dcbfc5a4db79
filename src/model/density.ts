// The density model: how many sandboxes of one spec a node can hold, and why.
// Pure; the same numbers feed the scheduler's filters, `cubectl density` and the console.

export interface NodeCapacity {
  cpus: number;
  memoryMiB: number;
  /** False when read from the host (a development box): `DensityParams.detected` applies. Absent = declared. */
  declared?: boolean;
}

/** host.detected: the quotas of a node whose capacity is read from the host. */
export interface DetectedParams {
  cpuOversellRatio: number;
  memOversellRatio: number;
  /** The reserve is min(memReservedMiB, this share of the node's memory). */
  memReservedPercent: number;
}

export interface DensityParams {
  /** scheduler.node_max_mem_reserved_in_mb */
  memReservedMiB: number;
  /** host.quota.mem_oversell_ratio */
  memOversellRatio: number;
  /** host.quota.cpu_oversell_ratio */
  cpuOversellRatio: number;
  /** scheduler.node_max_cpu_util, percent */
  cpuUtilCapPercent: number;
  /** scheduler.overhead.vm_memory_overhead_base_mib */
  overheadBaseMiB: number;
  /** scheduler.overhead.vm_memory_overhead_coefficient */
  overheadCoefficient: number;
  /** host.quota.paused_resource_release_ratio, 0..1 */
  releaseRatio: number;
  /** scheduler.node_max_mvm_num */
  maxSandboxes: number;
  /** host.detected; absent = every node follows the reference model. */
  detected?: DetectedParams;
}

export interface SpecShape {
  cpus: number;
  memoryMiB: number;
}

export interface Density {
  footprintMiB: number;
  /** Memory left for sandboxes after the host reserve, MiB. */
  memBudgetMiB: number;
  /** memBudget x mem oversell, MiB. */
  memQuotaMiB: number;
  /** cpus x cpu oversell x util cap. */
  cpuQuota: number;
  paperCeiling: number;
  safetyBoundary: number;
  cpuCeiling: number;
  /** min(paper, cpu, node_max_mvm_num). */
  effectiveCeiling: number;
  bottleneck: 'memory' | 'cpu';
  /** Ceiling if every sandbox were paused with the release ratio in force (paused ones count 1 - r). */
  allPausedCeiling: number;
}

export interface LiveCounts {
  running: number;
  paused: number;
}

export interface Headroom {
  /** Memory quota in use, MiB: running at full footprint, paused at (1 - r). */
  memUsedMiB: number;
  cpuUsed: number;
  /** Memory the release ratio gives back from paused sandboxes, MiB. */
  releasedMiB: number;
  /** More sandboxes of the spec that fit now. */
  headroom: number;
  /** Which limit the headroom hits first. */
  limitedBy: 'memory' | 'cpu' | 'mvm_num';
}

// Ratios such as 0.8 and 0.25 are not exact in binary: 117.99999 must count as 118.
const EPS = 1e-9;
const floorSafe = (x: number): number => Math.floor(x + EPS);

export class DensityInputError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'DensityInputError';
  }
}

/** Checks what a formula cannot make sense of, in the operator's words. */
export function validateDensityInput(node: NodeCapacity, params: DensityParams, spec: SpecShape): void {
  const positive = (v: number, what: string) => {
    if (!Number.isFinite(v) || v <= 0) throw new DensityInputError(`${what} must be a positive number (got ${v})`);
  };
  positive(node.cpus, 'node cpus');
  positive(node.memoryMiB, 'node memory');
  positive(spec.cpus, 'sandbox cpus');
  positive(spec.memoryMiB, 'sandbox memory');
  positive(params.memOversellRatio, 'mem_oversell_ratio');
  positive(params.cpuOversellRatio, 'cpu_oversell_ratio');
  positive(params.overheadCoefficient, 'vm_memory_overhead_coefficient');
  if (!(params.cpuUtilCapPercent > 0 && params.cpuUtilCapPercent <= 100))
    throw new DensityInputError(`node_max_cpu_util must be in (0, 100] (got ${params.cpuUtilCapPercent})`);
  if (!(params.memReservedMiB >= 0)) throw new DensityInputError(`node_max_mem_reserved_in_mb must be >= 0 (got ${params.memReservedMiB})`);
  if (params.memReservedMiB >= node.memoryMiB)
    throw new DensityInputError(`reserved memory ${params.memReservedMiB} MiB is not smaller than the node's ${node.memoryMiB} MiB`);
  if (!(params.releaseRatio >= 0 && params.releaseRatio <= 1))
    throw new DensityInputError(`paused_resource_release_ratio must be between 0 and 1 (got ${params.releaseRatio})`);
  if (!(params.overheadBaseMiB >= 0)) throw new DensityInputError(`vm_memory_overhead_base_mib must be >= 0 (got ${params.overheadBaseMiB})`);
}

export function footprintMiB(spec: SpecShape, params: Pick<DensityParams, 'overheadBaseMiB' | 'overheadCoefficient'>): number {
  return spec.memoryMiB + params.overheadBaseMiB + spec.memoryMiB / params.overheadCoefficient;
}

/**
 * The parameters in force on `node`: the reference model for a declared node; for one read from
 * the host, host.detected's oversell ratios and a reserve scaled to its memory (10 GiB of a 16 GiB
 * laptop leaves room for one 4 GiB sandbox; the reference reserve is sized for a 251 GiB host).
 */
export function paramsForNode(node: NodeCapacity, params: DensityParams): DensityParams {
  const d = params.detected;
  if (node.declared !== false || d === undefined) return params;
  return {
    ...params,
    cpuOversellRatio: d.cpuOversellRatio,
    memOversellRatio: d.memOversellRatio,
    memReservedMiB: Math.min(params.memReservedMiB, Math.floor((node.memoryMiB * d.memReservedPercent) / 100)),
  };
}

export function computeDensity(node: NodeCapacity, nodeParams: DensityParams, spec: SpecShape): Density {
  const params = paramsForNode(node, nodeParams);
  validateDensityInput(node, params, spec);
  const footprint = footprintMiB(spec, params);
  const memBudgetMiB = node.memoryMiB - params.memReservedMiB;
  const memQuotaMiB = memBudgetMiB * params.memOversellRatio;
  const cpuQuota = node.cpus * params.cpuOversellRatio * (params.cpuUtilCapPercent / 100);
  const paperCeiling = floorSafe(memQuotaMiB / footprint);
  const safetyBoundary = floorSafe(memBudgetMiB / footprint);
  const cpuCeiling = floorSafe(cpuQuota / spec.cpus);
  const bottleneck = cpuCeiling < paperCeiling ? 'cpu' : 'memory';
  const effectiveCeiling = Math.min(paperCeiling, cpuCeiling, params.maxSandboxes);
  const keep = 1 - params.releaseRatio;
  // With r = 1 a paused sandbox holds nothing: only the sandbox cap limits.
  const pausedMem = keep > EPS ? floorSafe(memQuotaMiB / (footprint * keep)) : Infinity;
  const pausedCpu = keep > EPS ? floorSafe(cpuQuota / (spec.cpus * keep)) : Infinity;
  const allPausedCeiling = Math.min(pausedMem, pausedCpu, params.maxSandboxes);
  return {
    footprintMiB: footprint,
    memBudgetMiB,
    memQuotaMiB,
    cpuQuota,
    paperCeiling,
    safetyBoundary,
    cpuCeiling,
    effectiveCeiling,
    bottleneck,
    allPausedCeiling,
  };
}

/**
 * What is left on a node given live counts. Every sandbox is assumed to have the given spec;
 * callers with mixed specs pass `used` sums instead through `headroomFromUsage`.
 */
export function computeHeadroom(node: NodeCapacity, params: DensityParams, spec: SpecShape, live: LiveCounts): Headroom {
  const fp = footprintMiB(spec, params);
  const keep = 1 - params.releaseRatio;
  return headroomFromUsage(node, params, spec, {
    memUsedMiB: live.running * fp + live.paused * fp * keep,
    cpuUsed: live.running * spec.cpus + live.paused * spec.cpus * keep,
    releasedMiB: live.paused * fp * params.releaseRatio,
    count: live.running + live.paused,
  });
}

export interface Usage {
  memUsedMiB: number;
  cpuUsed: number;
  releasedMiB: number;
  /** Sandboxes on the node, running and paused (all count against node_max_mvm_num). */
  count: number;
}

export function headroomFromUsage(node: NodeCapacity, params: DensityParams, spec: SpecShape, usage: Usage): Headroom {
  const d = computeDensity(node, params, spec);
  const byMem = Math.max(0, floorSafe((d.memQuotaMiB - usage.memUsedMiB) / d.footprintMiB));
  const byCpu = Math.max(0, floorSafe((d.cpuQuota - usage.cpuUsed) / spec.cpus));
  const byMvm = Math.max(0, params.maxSandboxes - usage.count);
  const headroom = Math.min(byMem, byCpu, byMvm);
  const limitedBy = headroom === byMem ? 'memory' : headroom === byCpu ? 'cpu' : 'mvm_num';
  return { memUsedMiB: usage.memUsedMiB, cpuUsed: usage.cpuUsed, releasedMiB: usage.releasedMiB, headroom, limitedBy };
}

/** Density parameters from the master config (the shape in src/config/schema.ts). */
export function densityParamsFromConfig(master: {
  scheduler: {
    node_max_mem_reserved_in_mb: number;
    node_max_cpu_util: number;
    node_max_mvm_num: number;
    overhead: { vm_memory_overhead_base_mib: number; vm_memory_overhead_coefficient: number };
  };
  host: {
    quota: { mem_oversell_ratio: number; cpu_oversell_ratio: number; paused_resource_release_ratio: number };
    detected?: { cpu_oversell_ratio: number; mem_oversell_ratio: number; mem_reserved_percent: number };
  };
}): DensityParams {
  const d = master.host.detected;
  return {
    memReservedMiB: master.scheduler.node_max_mem_reserved_in_mb,
    memOversellRatio: master.host.quota.mem_oversell_ratio,
    cpuOversellRatio: master.host.quota.cpu_oversell_ratio,
    cpuUtilCapPercent: master.scheduler.node_max_cpu_util,
    overheadBaseMiB: master.scheduler.overhead.vm_memory_overhead_base_mib,
    overheadCoefficient: master.scheduler.overhead.vm_memory_overhead_coefficient,
    releaseRatio: master.host.quota.paused_resource_release_ratio,
    maxSandboxes: master.scheduler.node_max_mvm_num,
    ...(d ? { detected: { cpuOversellRatio: d.cpu_oversell_ratio, memOversellRatio: d.mem_oversell_ratio, memReservedPercent: d.mem_reserved_percent } } : {}),
  };
}
