import { describe, expect, it } from 'vitest';
import type { NodeView } from '../../src/api/types.js';
import { triage } from '../../src/tui/triage.js';
import { loadStream } from './replay.js';

const snap = loadStream('watch-handwritten.ndjson')[0] as { type: 'snapshot'; snapshot: { nodes: NodeView[] } };
const base = snap.snapshot.nodes[0]!;
const node = (patch: { id?: string; live?: number; memAvail?: number; disk?: number; pool?: Partial<NodeView['pool']> }): NodeView => ({
  ...base,
  nodeID: patch.id ?? 'n1',
  sandboxes: { running: patch.live ?? 10, paused: 0, creating: 0, total: patch.live ?? 10 },
  usage: { ...base.usage, memAvailableMiB: patch.memAvail ?? 150_000, diskUsedPercent: patch.disk ?? 40 },
  pool: { ...base.pool, ...patch.pool },
});

describe('triage', () => {
  it('a calm node has no finding', () => expect(triage([node({})])).toEqual([]));

  it.each([
    ['above the safety boundary, memory still there', node({ live: 86 }), 'memory-oversell', 'warn', /86 live > 58 safe \(ceiling 117\); MemAvailable 146\.5Gi = 58%/],
    ['above the safety boundary and MemAvailable low', node({ live: 100, memAvail: 9000 }), 'memory-oversell', 'bad', /100 live > 58 safe.*MemAvailable 8\.8Gi = 4% of 251\.0Gi \(low\)/],
    ['disk over the watermark', node({ disk: 83.4 }), 'disk-watermark', 'bad', /disk 83% >= watermark 80%: healthy but takes no new sandboxes/],
    ['disk close to the watermark', node({ disk: 77 }), 'disk-watermark', 'warn', /disk 77%, watermark 80% \(3 points left\)/],
    ['sandbox store over the watermark', { ...node({ disk: 85 }), usage: { ...node({ disk: 85 }).usage, store: { kind: 'loop', path: '/d/store', sizeBytes: 40 * 2 ** 30, freeBytes: 6 * 2 ** 30, usedPercent: 85 } } }, 'disk-watermark', 'bad', /disk 85% >= watermark 80%: .*; sandbox store 6\.0Gi\/40\.0Gi free/],
    ['pool empty with waiters', node({ pool: { free: 0, inFlight: 5, onDemand: 12, waitP99Ms: 40 } }), 'nic-stall', 'bad', /pool 0\/32 free, 5 waiting, 12 on-demand, wait p99 40ms/],
    ['slow allocations with free slots', node({ pool: { free: 6, waitP99Ms: 250 } }), 'nic-stall', 'warn', /wait p99 250ms/],
  ] as const)('%s', (_name, n, bottleneck, severity, evidence) => {
    const [f, ...rest] = triage([n]);
    expect(rest).toEqual([]);
    expect(f).toMatchObject({ nodeID: 'n1', bottleneck, severity });
    expect(f!.evidence).toMatch(evidence);
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
