import { describe, expect, it } from 'vitest';
import type { NodeView, StatsView } from '../../src/api/types.js';
import { triage } from '../../src/tui/triage.js';
import { loadStream } from './replay.js';

const snap = loadStream('watch-handwritten.ndjson')[0] as { type: 'snapshot'; snapshot: { nodes: NodeView[] } };
const base = snap.snapshot.nodes[0]!;
const node = (patch: {
  id?: string;
  live?: number;
  memAvail?: number;
  memTotal?: number;
  headroom?: number;
  disk?: number;
  cpu?: number;
  pool?: Partial<NodeView['pool']>;
}): NodeView => ({
  ...base,
  nodeID: patch.id ?? 'n1',
  sandboxes: { running: patch.live ?? 10, paused: 0, creating: 0, total: patch.live ?? 10 },
  usage: {
    ...base.usage,
    memAvailableMiB: patch.memAvail ?? 150_000,
    diskUsedPercent: patch.disk ?? 40,
    cpuUtilPercent: patch.cpu ?? 20,
    ...(patch.memTotal ? { memTotalMiB: patch.memTotal } : {}),
  },
  density: { ...base.density, headroom: patch.headroom ?? 50 },
  pool: { ...base.pool, onDemandRecent: 0, ...patch.pool },
});
const stats = (refused: StatsView['refusedLastMinute']): StatsView => ({
  createsLastMinute: 0,
  createRatePerSec: 0,
  createP50Ms: 0,
  createP99Ms: 0,
  refusedLastMinute: refused,
});

describe('triage', () => {
  it('a calm node has no finding', () => expect(triage([node({})], { stats: stats([]) })).toEqual([]));

  it.each([
    [
      'above the safety boundary, memory still there',
      node({ live: 86 }),
      'memory-oversell',
      'warn',
      /86 live > 58 safe \(ceiling 117, headroom 50\); MemAvailable 146\.5Gi = 58% of 251\.0Gi$/,
      /before it runs low/,
    ],
    [
      'MemAvailable low against the REAL MemTotal, not the declared quota',
      node({ live: 100, memAvail: 2000, memTotal: 24_000 }),
      'memory-oversell',
      'bad',
      /MemAvailable 2\.0Gi = 8% of 23\.4Gi \(low\)/,
      /lower host\.quota\.paused_resource_release_ratio/,
    ],
    ['above the boundary with the ceiling reached', node({ live: 117, headroom: 0 }), 'memory-oversell', 'bad', /headroom 0/, /release_ratio/],
    [
      'disk over the watermark',
      node({ disk: 83.4 }),
      'disk-watermark',
      'bad',
      /disk 83% >= watermark 80%: healthy but takes no new sandboxes/,
      /free disk .* or move scheduler\.disk_usage_max_percent/,
    ],
    ['disk close to the watermark', node({ disk: 77 }), 'disk-watermark', 'warn', /disk 77%, watermark 80% \(3 points left\)/, /free disk/],
    [
      'sandbox store over the watermark',
      {
        ...node({ disk: 85 }),
        usage: { ...node({ disk: 85 }).usage, store: { kind: 'loop', path: '/d/store', sizeBytes: 40 * 2 ** 30, freeBytes: 6 * 2 ** 30, usedPercent: 85 } },
      },
      'disk-watermark',
      'bad',
      /disk 85% >= watermark 80%: .*; sandbox store 6\.0Gi\/40\.0Gi free/,
      /free disk/,
    ],
    [
      'pool empty with waiters',
      node({ pool: { free: 0, inFlight: 5, onDemand: 12, onDemandRecent: 3, waitP99Ms: 40 } }),
      'nic-stall',
      'bad',
      /pool 0\/32 free, 5 waiting, 3 on-demand in 5m, wait p99 40ms/,
      /raise network tap_init_num in cubelet\.toml above 32 \(restart needed\)/,
    ],
    ['slow allocations with free slots', node({ pool: { free: 6, waitP99Ms: 250 } }), 'nic-stall', 'bad', /wait p99 250ms/, /tap_init_num/],
    [
      'on-demand allocations in the window, nothing waiting now',
      node({ pool: { free: 6, onDemandRecent: 2 } }),
      'nic-stall',
      'warn',
      /2 on-demand in 5m/,
      /restart needed/,
    ],
    [
      'host cpu over the cap',
      node({ cpu: 94.8 }),
      'cpu-starvation',
      'bad',
      /host cpu 95% >= node_max_cpu_util 80%: the cpu filter refuses every create here/,
      /raise scheduler\.node_max_cpu_util/,
    ],
    [
      'host cpu near the cap',
      node({ cpu: 72 }),
      'cpu-starvation',
      'warn',
      /host cpu 72%, node_max_cpu_util 80%: creates and exec slow down/,
      /find what burns host CPU/,
    ],
  ] as const)('%s', (_name, n, bottleneck, severity, evidence, fix) => {
    const [f, ...rest] = triage([n]);
    expect(rest).toEqual([]);
    expect(f).toMatchObject({ nodeID: 'n1', bottleneck, severity });
    expect(f!.evidence).toMatch(evidence);
    expect(f!.fix).toMatch(fix);
  });

  it('windowed: on-demand allocations since start alone (the stall is over) are no finding', () => {
    expect(triage([node({ pool: { free: 6, onDemand: 40, onDemandRecent: 0, waitP99Ms: 3 } })])).toEqual([]);
  });

  it('creates being refused are BAD, counted by code and rule, with the fix of the top rule', () => {
    const [f] = triage([node({})], {
      stats: stats([
        { code: 130597, rule: 'cpu', count: 12 },
        { code: 130409, rule: 'release_ratio', count: 1 },
      ]),
    });
    expect(f).toMatchObject({
      nodeID: 'all',
      bottleneck: 'creates-refused',
      severity: 'bad',
      evidence: '13 refused in the last minute: 130597 cpu x12, 130409 release_ratio x1',
    });
    expect(f!.fix).toMatch(/node_max_cpu_util/);
  });

  it("gates on the sandboxes' cpu where the node reports it, as the cpu filter does; a busy host alone is a WARN", () => {
    const busy = (sbx: number) => ({ ...node({ cpu: 99 }), usage: { ...node({ cpu: 99 }).usage, sandboxCpuUtilPercent: sbx } });
    expect(triage([busy(85)])[0]).toMatchObject({
      bottleneck: 'cpu-starvation',
      severity: 'bad',
      evidence: 'sandbox cpu use 85% >= node_max_cpu_util 80%: the cpu filter refuses every create here',
    });
    expect(triage([busy(5)])[0]).toMatchObject({
      bottleneck: 'cpu-starvation',
      severity: 'warn',
      evidence: 'host cpu 99% (sandboxes 5%), node_max_cpu_util 80%: creates and exec slow down',
    });
  });

  it('uses the cpu cap in force', () => {
    expect(triage([node({ cpu: 55 })], { cpuCapPercent: 60 })[0]).toMatchObject({ bottleneck: 'cpu-starvation', severity: 'warn' });
    expect(triage([node({ cpu: 55 })], { cpuCapPercent: 90 })).toEqual([]);
  });

  it('the boundary itself is not oversold, and an empty pool nobody waits on is no stall', () => {
    expect(triage([node({ live: 58 })])).toEqual([]);
    expect(triage([node({ pool: { free: 0, inFlight: 0, waitP99Ms: 3 } })])).toEqual([]);
  });

  it('lists the worst first, then by node', () => {
    const out = triage([node({ id: 'b', disk: 78 }), node({ id: 'c', disk: 90 }), node({ id: 'a', disk: 79 })]);
    expect(out.map((f) => `${f.severity}:${f.nodeID}`)).toEqual(['bad:c', 'warn:a', 'warn:b']);
  });
});
