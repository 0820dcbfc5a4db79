import { describe, expect, it } from 'vitest';
import { computeDensity, densityParamsFromConfig } from '../../src/model/density.js';
import { headroomScore, prepareNode, type NodeContext } from '../../src/scheduler/plugin.js';
import { SCORERS } from '../../src/scheduler/scorers/index.js';
import { config, node, NOW, REQ } from './fixtures.js';

function ctx(n: ReturnType<typeof node>, inFlight = 0): NodeContext {
  const cfg = config();
  return { req: REQ, node: prepareNode(n), inFlightCreates: inFlight, cfg, now: NOW, density: computeDensity(n.capacity, densityParamsFromConfig(cfg), REQ) };
}

describe('headroomScore', () => {
  it.each([
    [0, 100, 100],
    [25, 100, 75],
    [100, 100, 0],
    [150, 100, 0],
    [0, 0, 100],
    [1, 0, 0],
  ])('%d used of %d -> %d', (used, limit, want) => {
    expect(headroomScore(used, limit)).toBe(want);
  });
});

describe('scorers', () => {
  it.each([
    ['mvm_num', node('a', { sandboxes: { total: 750 } }), 0, 75],
    ['mvm_num', node('a'), 0, 100],
    ['local_create_num', node('a'), 40, 60],
    ['quota_cpu_usage', node('a', { usage: { quotaCpuUsed: 307.2 / 2 } }), 0, 50],
    ['quota_mem_usage', node('a', { usage: { quotaMemUsedMiB: 493568 / 4 } }), 0, 75],
    ['quota_mem_usage', node('a'), 0, 100],
    ['warm', node('a'), 0, 0],
    ['warm', node('a', { warm: { templates: { host: { ready: 1, starting: 0, target: 1 } }, footprintMiB: 4202, hits: 0, misses: 0 } }), 0, 100],
    ['warm', node('a', { warm: { templates: { host: { ready: 1, starting: 0, target: 1 } }, footprintMiB: 4202, hits: 0, misses: 0 } }), 1, 0],
    ['warm', node('a', { warm: { templates: { host: { ready: 2, starting: 0, target: 2 } }, footprintMiB: 8404, hits: 0, misses: 0 } }), 1, 100],
    ['warm', node('a', { warm: { templates: { other: { ready: 1, starting: 0, target: 1 } }, footprintMiB: 4202, hits: 0, misses: 0 } }), 0, 0],
  ] as const)('%s (%#)', (name, n, inFlight, want) => {
    expect(SCORERS[name](ctx(n, inFlight))).toBeCloseTo(want, 6);
  });

  it('warm: only a create of the default spec can take a warm sandbox', () => {
    const n = node('a', { warm: { templates: { host: { ready: 1, starting: 0, target: 1 } }, footprintMiB: 4202, hits: 0, misses: 0 } });
    const c = ctx(n);
    const spec = c.cfg.sandbox.default_spec;
    expect(SCORERS.warm({ ...c, req: { templateID: 'host', cpus: spec.cpus, memoryMiB: spec.memory_mib } })).toBe(100);
    expect(SCORERS.warm({ ...c, req: { templateID: 'host', cpus: spec.cpus, memoryMiB: spec.memory_mib * 2 } })).toBe(0);
    expect(SCORERS.warm({ ...c, req: { templateID: 'host', cpus: spec.cpus, memoryMiB: spec.memory_mib, diskGiB: spec.disk_gib + 1 } })).toBe(0);
  });
});
