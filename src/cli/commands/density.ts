// `cubectl density`: the density model, offline, step by step as the reference RL team
// derived it (spec -> scheduling parameters -> ceilings).
import { statSync } from 'node:fs';
import { join } from 'node:path';
import type { Command } from 'commander';
import type { Density, DensityParams, NodeCapacity, SpecShape } from '../../model/density.js';
import { examples, globals, numberArg, printJson, UsageError } from '../io.js';

interface Opts {
  nodeCpus: number;
  nodeMemGib: number;
  sandboxCpus?: number;
  sandboxMemMib?: number;
  releaseRatio?: number;
  reservedMib?: number;
  config?: string;
}

export function register(program: Command): void {
  program
    .command('density')
    .summary('sandboxes of one spec a node can hold, derived step by step (offline)')
    .description(
      'How many sandboxes of one spec a node can hold, and which resource runs out first. Prints the derivation: the per-sandbox footprint (memory + base overhead + memory/coefficient), the scheduling parameters from cubemaster.yaml, then the paper ceiling (memory with oversell), the safety boundary (no oversell: no host OOM), the CPU ceiling, the bottleneck and, with a release ratio, the ceiling when every sandbox is paused. Needs no daemon.',
    )
    .requiredOption('--node-cpus <n>', 'CPUs of the node', numberArg({ positive: true }))
    .requiredOption('--node-mem-gib <g>', 'memory of the node in GiB (fractions allowed)', numberArg({ positive: true }))
    .option('--sandbox-cpus <c>', 'vCPUs per sandbox (default: sandbox.default_spec.cpus, 1)', numberArg({ positive: true }))
    .option('--sandbox-mem-mib <m>', 'memory per sandbox in MiB (default: sandbox.default_spec.memory_mib, 4096)', numberArg({ positive: true }))
    .option('--release-ratio <r>', 'host.quota.paused_resource_release_ratio, 0..1 (default: from the config, 0)', numberArg())
    .option('--reserved-mib <m>', 'scheduler.node_max_mem_reserved_in_mb (default: from the config, 10240)', numberArg({ min: 0 }))
    .option('--config <path>', 'cubemaster.yaml to take the parameters from, or a config dir (default: /etc/cubed when it exists, else the shipped defaults)')
    .addHelpText(
      'after',
      `
JSON (--json): node, spec, params, configFile, footprintMiB, memBudgetMiB, memQuotaMiB, cpuQuota,
paperCeiling, safetyBoundary, cpuCeiling, effectiveCeiling, bottleneck ("memory" | "cpu"),
releaseRatio, allPausedCeiling.
` +
        examples(
          '# the reference node: 117 on paper, 58 safe, CPU 307, memory-bound; 469 all paused at r = 0.75',
          'cubectl density --node-cpus 128 --node-mem-gib 251 --release-ratio 0.75',
          'cubectl density --node-cpus 2 --node-mem-gib 16 --sandbox-mem-mib 512 --json',
        ),
    )
    .action(async (opts: Opts, cmd: Command) => {
      // Loaded here so the other verbs start without the schema (zod) and the parsers.
      const { computeDensity, densityParamsFromConfig } = await import('../../model/density.js');
      const { json } = globals(cmd);
      const { file, master } = await loadMaster(opts.config);
      const params: DensityParams = {
        ...densityParamsFromConfig(master),
        ...(opts.releaseRatio === undefined ? {} : { releaseRatio: opts.releaseRatio }),
        ...(opts.reservedMib === undefined ? {} : { memReservedMiB: opts.reservedMib }),
      };
      const node: NodeCapacity = { cpus: opts.nodeCpus, memoryMiB: opts.nodeMemGib * 1024 };
      const spec: SpecShape = {
        cpus: opts.sandboxCpus ?? master.sandbox.default_spec.cpus,
        memoryMiB: opts.sandboxMemMib ?? master.sandbox.default_spec.memory_mib,
      };
      const d = computeDensity(node, params, spec);
      if (json) printJson({ node, spec, params, configFile: file ?? null, ...d, releaseRatio: params.releaseRatio });
      else process.stdout.write(derivation(node, spec, params, d, file, opts.releaseRatio !== undefined || params.releaseRatio > 0));
    });
}

async function loadMaster(flag: string | undefined) {
  const { FILE_NAMES, formatIssues, parseConfigText, readIfExists, resolveConfigDir } = await import('../../config/loader.js');
  let file: string | undefined;
  if (flag !== undefined) {
    const isDir = (() => {
      try {
        return statSync(flag).isDirectory();
      } catch {
        throw new UsageError(`--config ${flag}: no such file or directory`);
      }
    })();
    file = isDir ? join(flag, FILE_NAMES.master) : flag;
  } else {
    file = join(resolveConfigDir(), FILE_NAMES.master);
  }
  const text = readIfExists(file);
  if (text === undefined && flag !== undefined) throw new UsageError(`--config ${flag}: ${file} does not exist`);
  const parsed = parseConfigText('master', text);
  if (!parsed.ok) throw new UsageError(`${file}: ${formatIssues(parsed.errors)}`);
  return { file: text === undefined ? undefined : file, master: parsed.value };
}

const n = (x: number) => String(Math.round(x * 100) / 100);
const floorOf = (x: number, floored: number) => (Number.isInteger(x) ? `${floored}` : `floor(${n(x)}) = ${floored}`);

function derivation(node: NodeCapacity, spec: SpecShape, p: DensityParams, d: Density, file: string | undefined, showPaused: boolean): string {
  const keep = 1 - p.releaseRatio;
  const out = [
    `Node: ${n(node.cpus)} CPUs, ${n(node.memoryMiB / 1024)} GiB (${n(node.memoryMiB)} MiB). Spec: ${n(spec.cpus)} vCPU, ${n(spec.memoryMiB)} MiB.`,
    `Parameters from ${file ?? 'the schema defaults'}.`,
    '',
    '1. Spec -> per-sandbox footprint',
    `   footprint = memory + base + memory / coefficient = ${n(spec.memoryMiB)} + ${n(p.overheadBaseMiB)} + ${n(spec.memoryMiB)} / ${n(p.overheadCoefficient)} = ${n(d.footprintMiB)} MiB`,
    '',
    '2. Scheduling parameters',
    `   scheduler.node_max_mem_reserved_in_mb       ${n(p.memReservedMiB)} MiB kept for the host`,
    `   host.quota.mem_oversell_ratio               ${n(p.memOversellRatio)}`,
    `   host.quota.cpu_oversell_ratio               ${n(p.cpuOversellRatio)}`,
    `   scheduler.node_max_cpu_util                 ${n(p.cpuUtilCapPercent)} %`,
    `   scheduler.node_max_mvm_num                  ${p.maxSandboxes}`,
    `   host.quota.paused_resource_release_ratio    ${n(p.releaseRatio)}`,
    '',
    '3. Ceilings',
    `   memory budget   = ${n(node.memoryMiB)} - ${n(p.memReservedMiB)} = ${n(d.memBudgetMiB)} MiB`,
    `   paper ceiling   = ${n(d.memBudgetMiB)} x ${n(p.memOversellRatio)} / ${n(d.footprintMiB)} = ${floorOf(d.memQuotaMiB / d.footprintMiB, d.paperCeiling)}   (memory with oversell)`,
    `   safety boundary = ${n(d.memBudgetMiB)} / ${n(d.footprintMiB)} = ${floorOf(d.memBudgetMiB / d.footprintMiB, d.safetyBoundary)}   (no oversell: no host OOM)`,
    `   cpu ceiling     = ${n(node.cpus)} x ${n(p.cpuOversellRatio)} x ${n(p.cpuUtilCapPercent / 100)} / ${n(spec.cpus)} = ${floorOf(d.cpuQuota / spec.cpus, d.cpuCeiling)}`,
    `   effective       = min(paper ${d.paperCeiling}, cpu ${d.cpuCeiling}, node_max_mvm_num ${p.maxSandboxes}) = ${d.effectiveCeiling}`,
    `   bottleneck      = ${d.bottleneck}`,
  ];
  if (showPaused) {
    out.push('', `4. Every sandbox paused (r = ${n(p.releaseRatio)}: a paused sandbox still holds ${n(keep * 100)} % of its memory and cpu)`);
    if (keep <= 0) out.push(`   paused sandboxes hold nothing: only node_max_mvm_num limits = ${d.allPausedCeiling}`);
    else
      out.push(
        `   memory: ${n(d.memQuotaMiB)} / (${n(d.footprintMiB)} x ${n(keep)}) = ${n(d.memQuotaMiB / (d.footprintMiB * keep))}`,
        `   cpu:    ${n(d.cpuQuota)} / (${n(spec.cpus)} x ${n(keep)}) = ${n(d.cpuQuota / (spec.cpus * keep))}`,
        `   all-paused ceiling = min(floor(memory), floor(cpu), node_max_mvm_num ${p.maxSandboxes}) = ${d.allPausedCeiling}`,
      );
  }
  return out.join('\n') + '\n';
}
