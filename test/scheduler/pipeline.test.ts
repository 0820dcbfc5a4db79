import { describe, expect, it, vi } from 'vitest';
import { CubeError } from '../../src/errors.js';
import { FILTERS } from '../../src/scheduler/filters/index.js';
import { prepareNode } from '../../src/scheduler/plugin.js';
import { describeRejections, schedule } from '../../src/scheduler/pipeline.js';
import { schedulability, withSchedulability } from '../../src/control/schedulable.js';
import { config, node, NOW, REQ } from './fixtures.js';

const cand = (n: ReturnType<typeof node>, inFlightCreates = 0) => ({ view: n, inFlightCreates });
const first = () => 0;
const last = () => 0.999999;

describe('schedule', () => {
  describe('candidate_limit', () => {
    // 10 nodes; a seeded rand: the first call picks the start, the rest the ties and the pick.
    const ten = Array.from({ length: 10 }, (_, i) => cand(node(`n${i}`, { sandboxes: { total: i * 100 } })));
    const seq =
      (...xs: number[]) =>
      () =>
        xs.shift() ?? 0;
    it.each([
      ['0 scores every node: the emptiest wins', 0, [0.55], 'n0'],
      ['more than the nodes: every node', 20, [0.55], 'n0'],
      ['3 from a start at n5: the best of n5-n7', 3, [0.55], 'n5'],
      ['3 from a start at n8: wraps to n0', 3, [0.85], 'n0'],
    ])('%s', (_name, limit, rands, want) => {
      const cfg = config({ scheduler: { candidate_limit: limit, priority_select_num: 1 } });
      expect(schedule(REQ, ten, cfg, NOW, seq(...rands))).toMatchObject({ ok: true, nodeID: want });
    });
    it('refused nodes do not count: the refusal still names every node', () => {
      const full = Array.from({ length: 5 }, (_, i) => cand(node(`f${i}`, { cordoned: true })));
      const r = schedule(REQ, full, config({ scheduler: { candidate_limit: 2 } }), NOW, first);
      expect(r.ok === false && r.rejections.map((x) => x.nodeID)).toEqual(['f0', 'f1', 'f2', 'f3', 'f4']);
    });
  });

  it('refuses every node with the rule that refused it, in node order', () => {
    const nodes = [
      cand(node('node-a', { cordoned: true })),
      cand(node('node-b', { usage: { diskUsedPercent: 83 } })),
      cand(node('node-c', { usage: { quotaMemUsedMiB: 117 * 4202 } })),
      cand(node('node-d'), 100),
      cand(node('node-e', { templates: ['other'] })),
    ];
    const r = schedule(REQ, nodes, config(), NOW, first);
    expect(r).toEqual({
      ok: false,
      rejections: [
        { nodeID: 'node-a', filter: 'prefilter', reason: 'cordoned' },
        { nodeID: 'node-b', filter: 'disk', reason: 'disk 83% >= 80%' },
        { nodeID: 'node-c', filter: 'mem', reason: 'mem 117/117 (491634+4202 > 493568 MiB)' },
        { nodeID: 'node-d', filter: 'realtime_create_num', reason: 'creates in flight 100 >= 100' },
        { nodeID: 'node-e', filter: 'template_locality', reason: 'template host not on node' },
      ],
    });
    if (!r.ok) expect(describeRejections(r.rejections)).toContain('node-b: disk 83% >= 80%; node-c: mem 117/117');
  });

  it('keeps only the first refusal of a node, in enable_filters order', () => {
    const n = cand(node('a', { usage: { diskUsedPercent: 90, cpuUtilPercent: 95 } }));
    const cpuFirst = schedule(REQ, [n], config({ scheduler: { filter: { enable_filters: ['cpu', 'disk'] } } }), NOW, first);
    const diskFirst = schedule(REQ, [n], config({ scheduler: { filter: { enable_filters: ['disk', 'cpu'] } } }), NOW, first);
    expect(cpuFirst.ok === false && cpuFirst.rejections.map((r) => r.filter)).toEqual(['cpu']);
    expect(diskFirst.ok === false && diskFirst.rejections.map((r) => r.filter)).toEqual(['disk']);
  });

  it('a runtime request keeps only nodes of that driver, and says so for the others', () => {
    const nodes = [cand(node('ns-1', { runtime: 'ns' })), cand(node('sim-1', { runtime: 'sim' }))];
    expect(schedule({ ...REQ, runtime: 'sim' }, nodes, config(), NOW, first)).toMatchObject({ ok: true, nodeID: 'sim-1' });
    const r = schedule({ ...REQ, runtime: 'microvm' }, nodes, config(), NOW, first);
    expect(r.ok === false && describeRejections(r.rejections)).toBe('ns-1: runtime ns, not microvm; sim-1: runtime sim, not microvm');
  });

  it("a create that names no runtime goes where its template's default runtime is offered", () => {
    const both = { runtimes: [{ name: 'ns' }, { name: 'microvm' }] };
    const nodes = [cand(node('ns-1', { templateRuntimes: { host: 'microvm' } })), cand(node('vm-1', { ...both, templateRuntimes: { host: 'microvm' } }))];
    expect(schedule(REQ, nodes, config(), NOW, first)).toMatchObject({ ok: true, nodeID: 'vm-1' });
    const r = schedule(REQ, [nodes[0]!], config(), NOW, first);
    expect(r.ok === false && describeRejections(r.rejections)).toBe("ns-1: runtime ns, not microvm (template host's default)");
    // The create's own choice wins over the template's.
    expect(schedule({ ...REQ, runtime: 'ns' }, [nodes[0]!], config(), NOW, first)).toMatchObject({ ok: true, nodeID: 'ns-1' });
  });

  describe('a create asking for raw sockets (cube.net_raw) goes only where its runtime allows them', () => {
    const allows = { runtimes: [{ name: 'ns', netRaw: true }] };
    const nsBoth = { runtimes: [{ name: 'ns' }, { name: 'microvm', netRaw: true }] };
    const refusing = (id: string) => `${id}: runtime ns here does not allow raw sockets (cubelet identity.allow_net_raw)`;
    it.each([
      // The refusing node is listed first and `first` picks it among equals: placement must skip it.
      ['one node of two allows: placed there', { ...REQ, netRaw: true }, [node('deny'), node('allow', allows)], 'allow'],
      ['without the label every node takes it', REQ, [node('deny'), node('allow', allows)], 'deny'],
      ['an older node (no runtimes list) refuses', { ...REQ, netRaw: true }, [node('old'), node('allow', allows)], 'allow'],
      ["microvm: its guest's root has raw sockets", { ...REQ, netRaw: true, runtime: 'microvm' }, [node('deny'), node('vm', nsBoth)], 'vm'],
      [
        "the template's default runtime counts",
        { ...REQ, netRaw: true },
        [node('deny'), node('vm', { ...nsBoth, templateRuntimes: { host: 'microvm' } })],
        'vm',
      ],
    ])('%s', (_name, req, nodes, want) => {
      expect(
        schedule(
          req,
          nodes.map((n) => cand(n)),
          config(),
          NOW,
          first,
        ),
      ).toMatchObject({ ok: true, nodeID: want });
    });
    it.each([
      ['no node allows: each says so', { ...REQ, netRaw: true }, [node('a'), node('b', nsBoth)], `${refusing('a')}; ${refusing('b')}`],
      ['before the prefilter: a down node still says it would refuse', { ...REQ, netRaw: true }, [node('a', { lost: true })], refusing('a')],
      [
        'an allowing node that is full says why',
        { ...REQ, netRaw: true },
        [node('a'), node('full', { ...allows, sandboxes: { total: 3000 } })],
        `${refusing('a')}; full: sandboxes 3000 >= 3000`,
      ],
    ])('%s', (_name, req, nodes, want) => {
      const cfg = config({ scheduler: { filter: { enable_filters: ['mvm_num'] } } });
      const r = schedule(
        req,
        nodes.map((n) => cand(n)),
        cfg,
        NOW,
        first,
      );
      expect(r.ok === false && describeRejections(r.rejections)).toBe(want);
    });
  });

  it('a disabled filter does not refuse', () => {
    const full = cand(node('a', { usage: { diskUsedPercent: 99 } }));
    const r = schedule(REQ, [full], config({ scheduler: { filter: { enable_filters: ['cpu', 'mem'] } } }), NOW, first);
    expect(r).toMatchObject({ ok: true, nodeID: 'a' });
  });

  it('scores by weighted average and picks among the top priority_select_num', () => {
    const nodes = [
      cand(node('busy', { sandboxes: { total: 1500 } })), // mvm 50
      cand(node('idle')), // 100 everywhere
      cand(node('half', { sandboxes: { total: 750 } })), // mvm 75
    ];
    const cfg1 = config({ scheduler: { priority_select_num: 1, score: { enable_scorers: ['mvm_num'] } } });
    expect(schedule(REQ, nodes, cfg1, NOW, last)).toEqual({ ok: true, nodeID: 'idle', score: 100 });
    const cfg2 = config({ scheduler: { priority_select_num: 2, score: { enable_scorers: ['mvm_num'] } } });
    expect(schedule(REQ, nodes, cfg2, NOW, first)).toMatchObject({ nodeID: 'idle' });
    expect(schedule(REQ, nodes, cfg2, NOW, last)).toMatchObject({ nodeID: 'half', score: 75 });
    const cfg3 = config({ scheduler: { priority_select_num: 3, score: { enable_scorers: ['mvm_num'] } } });
    expect(schedule(REQ, nodes, cfg3, NOW, last)).toMatchObject({ nodeID: 'busy', score: 50 });
  });

  it('weights follow resource_weights (weighted average on 0-100)', () => {
    // mvm_num 50 (w 1), local_create_num 100 - 100 x 10/100 = 90 (w 3) -> (50 + 270) / 4 = 80
    const cfg = config({
      scheduler: {
        priority_select_num: 1,
        score: {
          enable_scorers: ['mvm_num', 'local_create_num'],
          resource_weights: { mvm_num: 1, local_create_num: 3, quota_cpu_usage: 0, quota_mem_usage: 0 },
        },
      },
    });
    expect(schedule(REQ, [cand(node('a', { sandboxes: { total: 1500 } }), 10)], cfg, NOW, first)).toEqual({ ok: true, nodeID: 'a', score: 80 });
    const off = config({
      scheduler: {
        priority_select_num: 1,
        score: {
          enable_scorers: ['mvm_num', 'local_create_num'],
          resource_weights: { mvm_num: 1, local_create_num: 0, quota_cpu_usage: 0, quota_mem_usage: 0 },
        },
      },
    });
    expect(schedule(REQ, [cand(node('a', { sandboxes: { total: 1500 } }), 10)], off, NOW, first)).toEqual({ ok: true, nodeID: 'a', score: 50 });
  });

  it('spreads over the top N: every one of them gets picked', () => {
    const nodes = ['a', 'b', 'c', 'd'].map((id) => cand(node(id)));
    const cfg = config({ scheduler: { priority_select_num: 3 } });
    const picked = new Set([0, 0.34, 0.67, 0.99].map((x) => (schedule(REQ, nodes, cfg, NOW, () => x) as { nodeID: string }).nodeID));
    expect([...picked].sort()).toEqual(['a', 'b', 'c']);
  });

  it('ties go to random nodes, not the first listed: 200 picks on 1000 identical nodes land on >= 150', () => {
    const nodes = Array.from({ length: 1000 }, (_, i) => cand(node(`n${i}`)));
    const cfg = config({ scheduler: { priority_select_num: 5 } });
    const picked = new Set(Array.from({ length: 200 }, () => (schedule(REQ, nodes, cfg, NOW) as { nodeID: string }).nodeID));
    // Uniform picks give ~181 distinct (birthday bound); arrival order gave 5.
    expect(picked.size).toBeGreaterThanOrEqual(150);
  });

  it('pins to the requested node, and says so when it is unknown', () => {
    const nodes = [cand(node('a')), cand(node('b', { usage: { diskUsedPercent: 95 } }))];
    expect(schedule({ ...REQ, nodeID: 'a' }, nodes, config(), NOW, last)).toMatchObject({ ok: true, nodeID: 'a' });
    expect(schedule({ ...REQ, nodeID: 'b' }, nodes, config(), NOW, last)).toEqual({
      ok: false,
      rejections: [{ nodeID: 'b', filter: 'disk', reason: 'disk 95% >= 80%' }],
    });
    expect(schedule({ ...REQ, nodeID: 'zz' }, nodes, config(), NOW, last)).toEqual({
      ok: false,
      rejections: [{ nodeID: 'zz', filter: 'prefilter', reason: 'not registered' }],
    });
  });

  it('a node whose memory is below the reserve is refused by capacity, not thrown', () => {
    const small = cand(node('tiny', { capacity: { cpus: 2, memoryMiB: 4096, declared: true } }));
    const r = schedule(REQ, [small], config(), NOW, first);
    expect(r.ok === false && r.rejections[0]).toMatchObject({ nodeID: 'tiny', filter: 'capacity' });
    expect(r.ok === false && r.rejections[0]!.reason).toContain('10240');
  });

  it('stale metrics take a node out; the heartbeat timeout follows the config', () => {
    const stale = cand(node('a', { lastSeen: NOW - 5000 }));
    expect(schedule(REQ, [stale], config(), NOW, first).ok).toBe(false);
    expect(schedule(REQ, [stale], config({ scheduler: { heartbeat_timeout_ms: 10000 } }), NOW, first).ok).toBe(true);
  });

  it('a config reloaded between decisions takes effect at the next one (what is made once per config is made again)', () => {
    // 60 x 4202 MiB held: over the 246784 MiB quota without oversell, under the 493568 with it.
    const n = [cand(node('a', { usage: { quotaMemUsedMiB: 60 * 4202 } }))];
    const tight = config({ host: { quota: { mem_oversell_ratio: 1 } } });
    const loose = config();
    expect(schedule(REQ, n, tight, NOW, first)).toMatchObject({ ok: false, rejections: [{ filter: 'mem' }] });
    expect(schedule(REQ, n, loose, NOW, first)).toMatchObject({ ok: true, nodeID: 'a' });
    expect(schedule(REQ, n, tight, NOW, first).ok).toBe(false);
    const noMem = config({ host: { quota: { mem_oversell_ratio: 1 } }, scheduler: { filter: { enable_filters: ['cpu', 'disk'] } } });
    expect(schedule(REQ, n, noMem, NOW, first).ok).toBe(true);
  });

  it("a candidate's prepared node counts only for the view it was made from", () => {
    const full = node('a', { usage: { diskUsedPercent: 95 } });
    const r = schedule(REQ, [{ view: full, inFlightCreates: 0, prepared: prepareNode(node('a')) }], config(), NOW, first);
    expect(r).toEqual({ ok: false, rejections: [{ nodeID: 'a', filter: 'disk', reason: 'disk 95% >= 80%' }] });
    const fresh = node('b');
    expect(schedule(REQ, [{ view: fresh, inFlightCreates: 0, prepared: prepareNode(fresh) }], config(), NOW, first)).toMatchObject({ ok: true, nodeID: 'b' });
  });

  it('a decision that places builds no refusal words; a refused one names every refused node', () => {
    const words = vi.spyOn(FILTERS.disk, 'reason');
    try {
      const nodes = [cand(node('full', { usage: { diskUsedPercent: 95 } })), cand(node('ok'))];
      expect(schedule(REQ, nodes, config(), NOW, first)).toMatchObject({ ok: true, nodeID: 'ok' });
      expect(words).not.toHaveBeenCalled();
      expect(schedule(REQ, [nodes[0]!], config(), NOW, first)).toEqual({
        ok: false,
        rejections: [{ nodeID: 'full', filter: 'disk', reason: 'disk 95% >= 80%' }],
      });
      expect(words).toHaveBeenCalledTimes(1);
    } finally {
      words.mockRestore();
    }
  });

  it('rejects a nonsensical request as a bad request', () => {
    expect(() => schedule({ ...REQ, cpus: 0 }, [cand(node('a'))], config(), NOW)).toThrow(CubeError);
  });
});

describe('describeRejections', () => {
  it.each([
    [[], 'no nodes registered'],
    [[{ nodeID: 'n1', filter: 'disk', reason: 'disk 83% >= 80%' }], 'n1: disk 83% >= 80%'],
    [
      [
        { nodeID: 'node-b', filter: 'disk', reason: 'disk 83% >= 80%' },
        { nodeID: 'node-c', filter: 'mem', reason: 'mem 117/117' },
      ],
      'node-b: disk 83% >= 80%; node-c: mem 117/117',
    ],
  ])('%j', (rejections, want) => {
    expect(describeRejections(rejections)).toBe(want);
  });
});

describe('schedulability', () => {
  it.each([
    ['fresh node', node('a'), { schedulable: true, reason: '' }],
    [
      'over the disk watermark: healthy, not schedulable',
      node('a', { usage: { diskUsedPercent: 83 } }),
      { schedulable: false, reason: 'disk 83% >= 80%', refusedBy: 'disk' },
    ],
    ['cordoned', node('a', { cordoned: true }), { schedulable: false, reason: 'cordoned', refusedBy: 'prefilter' }],
    [
      'host cpu over node_max_cpu_util (the verdict a create gets)',
      node('a', { usage: { cpuUtilPercent: 94.8 } }),
      { schedulable: false, reason: 'cpu util 94.8% >= 80%', refusedBy: 'cpu' },
    ],
  ])('%s', (_name, n, want) => {
    expect(schedulability(n, 0, config(), NOW)).toEqual(want);
  });
});

describe('withSchedulability', () => {
  it("carries every rule's answer, not just the first refusal (what the console's describe shows)", () => {
    const v = withSchedulability(node('a', { cordoned: true, usage: { diskUsedPercent: 83 } }), 0, config(), NOW);
    expect(v).toMatchObject({ schedulable: false, reason: 'cordoned', refusedBy: 'prefilter' });
    expect(v.rules?.[0]).toEqual({ rule: 'prefilter', refusal: 'cordoned' });
    expect(v.rules).toContainEqual({ rule: 'disk', refusal: 'disk 83% >= 80%' });
    expect(v.rules).toContainEqual({ rule: 'mem' });
    // A node's own rules (an older replica's copy) are replaced, never kept.
    expect(withSchedulability({ ...node('a'), rules: [{ rule: 'prefilter', refusal: 'old' }] }, 0, config(), NOW).rules?.[0]).toEqual({ rule: 'prefilter' });
  });
});
