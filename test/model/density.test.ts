import { describe, expect, it } from 'vitest';
import { MasterConfigSchema } from '../../src/config/schema.js';
import { computeDensity, computeHeadroom, DensityInputError, densityParamsFromConfig, footprintMiB, type DensityParams } from '../../src/model/density.js';

const DEFAULTS = densityParamsFromConfig(MasterConfigSchema.parse({}));
const REF_NODE = { cpus: 128, memoryMiB: 251 * 1024 };
const REF_SPEC = { cpus: 1, memoryMiB: 4096 };
const p = (over: Partial<DensityParams> = {}): DensityParams => ({ ...DEFAULTS, ...over });

describe('density parameters from the config', () => {
  it('are the CubeSandbox defaults', () => {
    expect(DEFAULTS).toEqual({
      memReservedMiB: 10240,
      memOversellRatio: 2,
      cpuOversellRatio: 3,
      cpuUtilCapPercent: 80,
      overheadBaseMiB: 42,
      overheadCoefficient: 64,
      releaseRatio: 0,
      maxSandboxes: 3000,
      detected: { cpuOversellRatio: 16, memOversellRatio: 6, memReservedPercent: 25 },
    });
  });
});

describe('nodes whose capacity is read from the host (host.detected)', () => {
  const DEV = { cpus: 2, memoryMiB: 24 * 1024, declared: false };
  it.each([
    // 2 x 16 x 0.8 = 25.6 one-vCPU sandboxes; reserve min(10240, 25% of 24576 = 6144); (24576 - 6144) x 6 / 562 = 196.
    [
      '2-core 24 GiB box, small sandboxes',
      DEV,
      { cpus: 1, memoryMiB: 512 },
      { cpuQuota: 25.6, cpuCeiling: 25, memBudgetMiB: 18432, paperCeiling: 196, effectiveCeiling: 25, bottleneck: 'cpu' },
    ],
    ['2-core 24 GiB box, the default spec', DEV, REF_SPEC, { paperCeiling: 26, safetyBoundary: 4, effectiveCeiling: 25 }],
    [
      '2-core 8 GiB laptop, small sandboxes',
      { cpus: 2, memoryMiB: 8192, declared: false },
      { cpus: 1, memoryMiB: 512 },
      { memBudgetMiB: 6144, paperCeiling: 65, effectiveCeiling: 25 },
    ],
    // The reserve is never raised above node_max_mem_reserved_in_mb: 25% of 251 GiB is 64256 > 10240.
    [
      'a large undeclared host keeps the 10 GiB reserve',
      { ...REF_NODE, declared: false },
      REF_SPEC,
      { memBudgetMiB: 246784, paperCeiling: 352, cpuCeiling: 1638 },
    ],
    ['declared: the reference model, unchanged', { ...REF_NODE, declared: true }, REF_SPEC, { paperCeiling: 117, safetyBoundary: 58, cpuCeiling: 307 }],
  ] as const)('%s', (_name, node, spec, expected) => {
    expect(computeDensity(node, DEFAULTS, spec)).toMatchObject(expected);
  });

  it('without host.detected every node follows the reference model', () => {
    const { detected: _, ...reference } = DEFAULTS;
    expect(computeDensity({ ...REF_NODE, declared: false }, reference, REF_SPEC)).toMatchObject({ paperCeiling: 117, cpuCeiling: 307 });
  });
});

describe('footprint', () => {
  it.each([
    [4096, 4202],
    [512, 562],
    [64, 107],
  ])('%i MiB -> %f MiB', (mem, fp) => {
    expect(footprintMiB({ cpus: 1, memoryMiB: mem }, DEFAULTS)).toBe(fp);
  });
});

describe('computeDensity', () => {
  it.each([
    // name, node, params, spec, expected subset
    [
      'reference node (issue numbers)',
      REF_NODE,
      p(),
      REF_SPEC,
      { footprintMiB: 4202, paperCeiling: 117, safetyBoundary: 58, cpuCeiling: 307, bottleneck: 'memory', effectiveCeiling: 117, allPausedCeiling: 117 },
    ],
    ['reference node, r = 0.75', REF_NODE, p({ releaseRatio: 0.75 }), REF_SPEC, { paperCeiling: 117, allPausedCeiling: 469 }],
    ['reference node, r = 0.5', REF_NODE, p({ releaseRatio: 0.5 }), REF_SPEC, { allPausedCeiling: 234 }],
    ['r = 1: paused sandboxes hold nothing, only the sandbox cap limits', REF_NODE, p({ releaseRatio: 1 }), REF_SPEC, { allPausedCeiling: 3000 }],
    [
      'r = 0.75 with a cpu-bound spec: the paused ceiling is cpu-bound too',
      REF_NODE,
      p({ releaseRatio: 0.75 }),
      { cpus: 4, memoryMiB: 512 },
      { cpuCeiling: 76, paperCeiling: 878, bottleneck: 'cpu', effectiveCeiling: 76, allPausedCeiling: 307 },
    ],
    [
      'small cpu-bound node',
      { cpus: 4, memoryMiB: 65536 },
      p(),
      { cpus: 1, memoryMiB: 512 },
      { footprintMiB: 562, paperCeiling: 196, safetyBoundary: 98, cpuCeiling: 9, bottleneck: 'cpu', effectiveCeiling: 9 },
    ],
    [
      'node_max_mvm_num caps the effective ceiling',
      REF_NODE,
      p({ maxSandboxes: 50 }),
      REF_SPEC,
      { paperCeiling: 117, effectiveCeiling: 50, bottleneck: 'memory' },
    ],
    ['no oversell: paper = safety', REF_NODE, p({ memOversellRatio: 1 }), REF_SPEC, { paperCeiling: 58, safetyBoundary: 58 }],
    [
      '29% x 100 cpus is 29, not 28.999999',
      { cpus: 100, memoryMiB: 1 << 20 },
      p({ cpuOversellRatio: 1, cpuUtilCapPercent: 29 }),
      { cpus: 1, memoryMiB: 1024 },
      { cpuCeiling: 29 },
    ],
    [
      'fractional vCPUs',
      { cpus: 2, memoryMiB: 16384 },
      p({ memReservedMiB: 1024 }),
      { cpus: 0.5, memoryMiB: 256 },
      { cpuCeiling: 9, footprintMiB: 302, paperCeiling: 101, bottleneck: 'cpu' },
    ],
    [
      'a spec larger than the budget fits zero times',
      { cpus: 8, memoryMiB: 12288 },
      p(),
      REF_SPEC,
      { paperCeiling: 0, safetyBoundary: 0, effectiveCeiling: 0, bottleneck: 'memory' },
    ],
  ] as const)('%s', (_name, node, params, spec, expected) => {
    expect(computeDensity(node, params, spec)).toMatchObject(expected);
  });

  it.each([
    ['negative sandbox memory', REF_NODE, p(), { cpus: 1, memoryMiB: -1 }, /sandbox memory must be a positive number/],
    ['zero node cpus', { cpus: 0, memoryMiB: 1024 }, p(), REF_SPEC, /node cpus must be a positive number/],
    ['NaN node memory', { cpus: 1, memoryMiB: Number.NaN }, p(), REF_SPEC, /node memory must be a positive number/],
    ['ratio 1.5', REF_NODE, p({ releaseRatio: 1.5 }), REF_SPEC, /paused_resource_release_ratio must be between 0 and 1/],
    ['negative ratio', REF_NODE, p({ releaseRatio: -0.1 }), REF_SPEC, /paused_resource_release_ratio must be between 0 and 1/],
    ['reserve larger than the node', { cpus: 4, memoryMiB: 8192 }, p(), REF_SPEC, /reserved memory 10240 MiB is not smaller than the node's 8192 MiB/],
    ['reserve equal to the node', { cpus: 4, memoryMiB: 10240 }, p(), REF_SPEC, /not smaller/],
    ['util cap 0', REF_NODE, p({ cpuUtilCapPercent: 0 }), REF_SPEC, /node_max_cpu_util must be in \(0, 100\]/],
    ['util cap 150', REF_NODE, p({ cpuUtilCapPercent: 150 }), REF_SPEC, /node_max_cpu_util/],
  ] as const)('refuses %s', (_name, node, params, spec, msg) => {
    expect(() => computeDensity(node, params, spec)).toThrow(DensityInputError);
    expect(() => computeDensity(node, params, spec)).toThrow(msg);
  });
});

describe('computeHeadroom', () => {
  it.each([
    ['empty reference node', p(), { running: 0, paused: 0 }, { headroom: 117, limitedBy: 'memory', memUsedMiB: 0, releasedMiB: 0 }],
    ['100 running', p(), { running: 100, paused: 0 }, { headroom: 17, limitedBy: 'memory', memUsedMiB: 420200, cpuUsed: 100 }],
    [
      '60 running + 40 paused at r = 0.75',
      p({ releaseRatio: 0.75 }),
      { running: 60, paused: 40 },
      { headroom: 47, limitedBy: 'memory', memUsedMiB: 294140, releasedMiB: 126060, cpuUsed: 70 },
    ],
    ['full node', p(), { running: 117, paused: 0 }, { headroom: 0, limitedBy: 'memory' }],
    ['over-full node never goes negative', p(), { running: 130, paused: 0 }, { headroom: 0 }],
    ['the sandbox cap comes first', p({ maxSandboxes: 105 }), { running: 100, paused: 0 }, { headroom: 5, limitedBy: 'mvm_num' }],
  ] as const)('%s', (_name, params, live, expected) => {
    expect(computeHeadroom(REF_NODE, params, REF_SPEC, live)).toMatchObject(expected);
  });

  it('cpu limits a cpu-heavy spec', () => {
    expect(computeHeadroom({ cpus: 4, memoryMiB: 65536 }, p(), { cpus: 1, memoryMiB: 512 }, { running: 5, paused: 0 })).toMatchObject({
      headroom: 4,
      limitedBy: 'cpu',
    });
  });
});
