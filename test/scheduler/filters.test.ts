import { describe, expect, it } from 'vitest';
import { computeDensity, densityParamsFromConfig } from '../../src/model/density.js';
import { FILTERS } from '../../src/scheduler/filters/index.js';
import { prefilter } from '../../src/scheduler/filters/prefilter.js';
import { SCORERS } from '../../src/scheduler/scorers/index.js';
import { holds, prepareNode, type Filter, type NodeContext } from '../../src/scheduler/plugin.js';
import { config, node, NOW, REQ } from './fixtures.js';

function ctx(n: ReturnType<typeof node>, opts: { inFlight?: number; cfg?: Record<string, unknown>; req?: Partial<typeof REQ> } = {}): NodeContext {
  const cfg = config(opts.cfg);
  const req = { ...REQ, ...opts.req };
  return {
    req,
    node: prepareNode(n),
    inFlightCreates: opts.inFlight ?? 0,
    cfg,
    now: NOW,
    density: computeDensity(n.capacity, densityParamsFromConfig(cfg), req),
  };
}

/** The filter's words, checked against its quick verdict (the pipeline runs `passes`, and `reason` only to report a refusal). */
function verdict(filter: Filter, c: NodeContext): string | undefined {
  const reason = filter.reason(c);
  expect(filter.passes(c)).toBe(reason === undefined);
  return reason;
}

describe('prefilter', () => {
  it.each([
    ['fresh healthy node passes', node('a'), undefined],
    ['lost', node('a', { lost: true, healthy: false }), 'lost (missed heartbeats)'],
    ['unhealthy', node('a', { healthy: false }), 'unhealthy'],
    ['cordoned', node('a', { cordoned: true }), 'cordoned'],
    ['draining', node('a', { draining: true }), 'draining'],
    ['stale metrics', node('a', { lastSeen: NOW - 4200 }), 'heartbeat 4.2s old > 3s'],
    ['exactly at the timeout still passes', node('a', { lastSeen: NOW - 3000 }), undefined],
    ['never seen', node('a', { lastSeen: NaN }), 'no heartbeat yet'],
  ])('%s', (_name, n, want) => {
    expect(prefilter(n, 3000, NOW)).toBe(want);
  });
});

describe('cpu', () => {
  // 128 cpus x 3 x 0.8 = 307.2
  it.each([
    ['room left', node('a', { usage: { quotaCpuUsed: 306 } }), {}, undefined],
    ['quota full', node('a', { usage: { quotaCpuUsed: 306.5 } }), {}, 'cpu quota 306.5+1 > 307.2'],
    ['live util at the cap', node('a', { usage: { cpuUtilPercent: 80 } }), {}, 'cpu util 80% >= 80%'],
    ['cap raised by config', node('a', { usage: { cpuUtilPercent: 80 } }), { scheduler: { node_max_cpu_util: 90 } }, undefined],
    ['oversell 1 shrinks the quota', node('a', { usage: { quotaCpuUsed: 102 } }), { host: { quota: { cpu_oversell_ratio: 1 } } }, 'cpu quota 102+1 > 102.4'],
    [
      'a busy host with idle sandboxes passes: only the sandboxes count',
      node('a', { usage: { cpuUtilPercent: 100, sandboxCpuUtilPercent: 5 } }),
      {},
      undefined,
    ],
    ['sandboxes using 80% of the node close it', node('a', { usage: { cpuUtilPercent: 85, sandboxCpuUtilPercent: 80 } }), {}, 'sandbox cpu use 80% >= 80%'],
    [
      '2-core box read from the host: 25 one-vCPU sandboxes',
      node('a', { capacity: { cpus: 2, memoryMiB: 24576, declared: false }, usage: { quotaCpuUsed: 24.5 } }),
      {},
      undefined,
    ],
    ['... and not 26', node('a', { capacity: { cpus: 2, memoryMiB: 24576, declared: false }, usage: { quotaCpuUsed: 25 } }), {}, 'cpu quota 25+1 > 25.6'],
  ])('%s', (_name, n, cfg, want) => {
    expect(verdict(FILTERS.cpu, ctx(n, { cfg }))).toBe(want);
  });
});

describe('mem', () => {
  // (257024 - 10240) x 2 = 493568 MiB quota; footprint 4202 -> 117 of the reference spec.
  it.each([
    ['empty node', node('a'), {}, undefined],
    ['116 held, the 117th fits', node('a', { usage: { quotaMemUsedMiB: 116 * 4202 } }), {}, undefined],
    ['117 held: full', node('a', { usage: { quotaMemUsedMiB: 117 * 4202 } }), {}, 'mem 117/117 (491634+4202 > 493568 MiB)'],
    [
      'no oversell: the safety boundary',
      node('a', { usage: { quotaMemUsedMiB: 58 * 4202 } }),
      { host: { quota: { mem_oversell_ratio: 1 } } },
      'mem 58/58 (243716+4202 > 246784 MiB)',
    ],
    [
      'paused count (1 - r): 200 paused at r=0.75 fit',
      node('a', { usage: { quotaMemUsedMiB: 200 * 4202 * 0.25 } }),
      { host: { quota: { paused_resource_release_ratio: 0.75 } } },
      undefined,
    ],
    [
      'bigger reserve',
      node('a', { usage: { quotaMemUsedMiB: 116 * 4202 } }),
      { scheduler: { node_max_mem_reserved_in_mb: 20480 } },
      'mem 116/112 (487432+4202 > 473088 MiB)',
    ],
    // 24 GiB read from the host: reserve 6144 MiB, and MemAvailable must stay above it.
    [
      'host-read node with memory to spare',
      node('a', { capacity: { cpus: 2, memoryMiB: 24576, declared: false }, usage: { memAvailableMiB: 9000 } }),
      {},
      undefined,
    ],
    [
      'host-read node short of real memory',
      node('a', { capacity: { cpus: 2, memoryMiB: 24576, declared: false }, usage: { memAvailableMiB: 6000 } }),
      {},
      'memory available 6000 MiB < reserve 6144 MiB',
    ],
    ['a declared node is not gated on MemAvailable', node('a', { usage: { memAvailableMiB: 100 } }), {}, undefined],
  ])('%s', (_name, n, cfg, want) => {
    expect(verdict(FILTERS.mem, ctx(n, { cfg }))).toBe(want);
  });
});

describe('disk', () => {
  it.each([
    ['under the watermark', 79.9, {}, undefined],
    ['at the watermark', 80, {}, 'disk 80% >= 80%'],
    ['over', 83, {}, 'disk 83% >= 80%'],
    ['watermark raised', 83, { scheduler: { disk_usage_max_percent: 90 } }, undefined],
  ])('%s', (_name, pct, cfg, want) => {
    expect(verdict(FILTERS.disk, ctx(node('a', { usage: { diskUsedPercent: pct } }), { cfg }))).toBe(want);
  });
});

describe('disk_quota', () => {
  const GIB = 1024 ** 3;
  const withStore = (gib: number, quotaDiskUsedGiB: number | undefined) =>
    node('a', {
      usage: {
        ...(quotaDiskUsedGiB !== undefined ? { quotaDiskUsedGiB } : {}),
        store: { kind: 'loop', path: '/x/store', sizeBytes: gib * GIB, freeBytes: gib * GIB, usedPercent: 0 },
      },
    });
  it.each([
    // The headline workload: 20 sandboxes of the default 10 GiB spec on a 10 GiB store pass at the default ratio 20 (200 GiB).
    ['the 20th default sandbox on a 10 GiB store', withStore(10, 190), { diskGiB: 10 }, {}, undefined],
    ['... and not the 21st', withStore(10, 200), { diskGiB: 10 }, {}, 'disk quota 200+10 > 200 GiB (store 10 GiB x 20 disk oversell)'],
    ['exactly full passes', withStore(12, 230), { diskGiB: 10 }, {}, undefined],
    ['one over', withStore(12, 231), { diskGiB: 10 }, {}, 'disk quota 231+10 > 240 GiB (store 12 GiB x 20 disk oversell)'],
    [
      "ratio 1: the issue's 2 GiB store takes two 1 GiB sandboxes, not three",
      withStore(2, 2),
      { diskGiB: 1 },
      { host: { quota: { disk_oversell_ratio: 1 } } },
      'disk quota 2+1 > 2 GiB (store 2 GiB x 1 disk oversell)',
    ],
    [
      'ratio below 1 keeps room',
      withStore(10, 4),
      { diskGiB: 1.5 },
      { host: { quota: { disk_oversell_ratio: 0.5 } } },
      'disk quota 4+1.5 > 5 GiB (store 10 GiB x 0.5 disk oversell)',
    ],
    ['an older node reports no quota sum: counted as 0', withStore(2, undefined), { diskGiB: 1 }, { host: { quota: { disk_oversell_ratio: 1 } } }, undefined],
    ['no store (a runtime without one): passes', node('a', { usage: { quotaDiskUsedGiB: 5000 } }), { diskGiB: 10 }, {}, undefined],
    ['a request naming no disk counts 0', withStore(1, 20), {}, {}, undefined],
  ])('%s', (_name, n, req, cfg, want) => {
    expect(verdict(FILTERS.disk_quota, ctx(n, { cfg, req }))).toBe(want);
  });
});

describe('realtime_create_num', () => {
  it.each([
    [0, 100, undefined],
    [99, 100, undefined],
    [100, 100, 'creates in flight 100 >= 100'],
    [5, 5, 'creates in flight 5 >= 5'],
  ])('%i in flight, limit %i', (inFlight, limit, want) => {
    expect(verdict(FILTERS.realtime_create_num, ctx(node('a'), { inFlight, cfg: { scheduler: { realtime_create_num: limit } } }))).toBe(want);
  });
});

describe('template_locality', () => {
  // [template, node's templates, node fetches (reports layers), cluster says fetchable, filter's answer, scorer's]
  it.each<[string, string[], boolean, boolean, string | undefined, number]>([
    ['host', ['host'], false, false, undefined, 100],
    ['py', ['host'], false, false, 'template py not on node', 0],
    ['py', ['host', 'py'], false, false, undefined, 100],
    ['py', ['host', 'py'], true, true, undefined, 100],
    ['py', ['host'], true, true, undefined, 0],
    ['py', ['host'], true, false, 'template py not on node', 0],
    ['py', ['host'], false, true, 'template py not on node, which fetches no templates', 0],
  ])('%s on %j (fetches %s, fetchable %s)', (templateID, templates, fetches, fetchable, want, score) => {
    const c = ctx(node('a', { templates, ...(fetches ? { layers: [] } : {}) }), { req: { templateID, fetchable } });
    expect(verdict(FILTERS.template_locality, c)).toBe(want);
    expect(SCORERS.template_locality(c)).toBe(score);
  });

  it('scores a node already fetching the template between holders and the rest', () => {
    const fetching = node('a', { templates: ['host'], layers: [], fetching: ['py:latest 1/3'] });
    expect(SCORERS.template_locality(ctx(fetching, { req: { templateID: 'py', fetchable: true } }))).toBe(50);
    expect(SCORERS.template_locality(ctx(fetching, { req: { templateID: 'py:v2', fetchable: true } }))).toBe(0);
  });
});

describe('mvm_num', () => {
  it.each([
    [2999, 3000, undefined],
    [3000, 3000, 'sandboxes 3000 >= 3000'],
    [10, 10, 'sandboxes 10 >= 10'],
  ])('%i sandboxes, cap %i', (total, cap, want) => {
    expect(verdict(FILTERS.mvm_num, ctx(node('a', { sandboxes: { total } }), { cfg: { scheduler: { node_max_mvm_num: cap } } }))).toBe(want);
  });
});

describe('holds', () => {
  it('a name asked for before any node listed it is found once a node lists it', () => {
    const early = prepareNode(node('early', { templates: ['host'] }));
    expect(holds(early, 'late-name')).toBe(false);
    expect(holds(prepareNode(node('late', { templates: ['late-name'] })), 'late-name')).toBe(true);
    expect(holds(early, 'late-name')).toBe(false);
  });

  it('answers for every template name, also past the names that get a bit (30), and for a name built at run time', () => {
    const names = Array.from({ length: 45 }, (_, i) => `t${i}`);
    const nodes = names.map((t, i) => prepareNode(node(`n${i}`, { templates: ['host', t] })));
    for (const [i, n] of nodes.entries()) {
      expect(holds(n, 'host')).toBe(true);
      expect(holds(n, `t${String(i)}`)).toBe(true);
      expect(holds(n, `t${String((i + 1) % names.length)}`)).toBe(false);
      expect(holds(n, 'never-listed')).toBe(false);
    }
  });
});
