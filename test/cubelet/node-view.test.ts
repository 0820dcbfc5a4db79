import { describe, expect, it } from 'vitest';
import type { PoolView, StoreView } from '../../src/api/types.js';
import { MasterConfigSchema } from '../../src/config/schema.js';
import { parseMeminfo, parseProcStat, cpuUtilPercent } from '../../src/cubelet/host-metrics.js';
import { buildNodeView, unschedulableReason, withOperatorFlags } from '../../src/cubelet/node-view.js';

const pool: PoolView = { free: 4, inUse: 0, creating: 0, total: 4, target: 4, inFlight: 0, onDemand: 0, waitP50Ms: 0, waitP99Ms: 0, recentWaitsMs: [] };
const spec = { cpus: 1, memoryMiB: 4096, diskGiB: 10 };
// The reference node of design.md: 128 cores, 251 GiB, default spec 1 vCPU / 4096 MiB.
const view = (over: { ratio?: number; running?: number; paused?: number; disk?: number; store?: StoreView; pool?: Partial<PoolView> } = {}) =>
  buildNodeView({
    nodeID: 'n1',
    runtime: 'ns',
    capacity: { cpus: 128, memoryMiB: 251 * 1024, declared: true },
    cpuUtilPercent: 10,
    memAvailableMiB: 1000,
    diskUsedPercent: over.disk ?? 10,
    ...(over.store ? { store: over.store } : {}),
    master: MasterConfigSchema.parse({ host: { quota: { paused_resource_release_ratio: over.ratio ?? 0 } } }),
    sandboxes: [
      ...Array.from({ length: over.running ?? 0 }, () => ({ state: 'running' as const, spec })),
      ...Array.from({ length: over.paused ?? 0 }, () => ({ state: 'paused' as const, spec })),
    ],
    pool: { ...pool, ...over.pool },
    poolSlotLimit: 16383,
    templates: ['host'],
    now: new Date(0),
  });

describe('node view', () => {
  it('reproduces the reference density numbers', () => {
    expect(view().density).toMatchObject({ footprintMiB: 4202, paperCeiling: 117, safetyBoundary: 58, cpuCeiling: 307, bottleneck: 'memory', headroom: 117 });
    expect(view({ ratio: 0.75 }).density.allPausedCeiling).toBe(469);
  });

  it.each([
    [{ running: 100 }, 17, 0, true, ''],
    [{ running: 100, paused: 20, ratio: 0 }, 0, 0, false, 'memory ceiling reached'],
    [{ running: 100, paused: 20, ratio: 0.75 }, 12, 63030, true, ''],
    [{ running: 100, paused: 20, ratio: 1 }, 17, 84040, true, ''],
    [{ disk: 83 }, 117, 0, false, 'disk watermark 83% >= 80%'],
    [{ pool: { free: 0, total: 16383 } }, 117, 0, false, 'pool exhausted'],
  ] as const)('%o: headroom %i, released %i MiB, schedulable %s (%s)', (over, headroom, released, schedulable, reason) => {
    const v = view(over);
    expect(v.density.headroom).toBe(headroom);
    expect(v.density.releasedMiB).toBe(released);
    expect([v.schedulable, v.reason]).toEqual([schedulable, reason]);
  });

  it('operator flags come on top of the node\'s own reason and go away with it', () => {
    const disk = view({ disk: 90 });
    expect(withOperatorFlags(disk, { cordoned: true, draining: false })).toMatchObject({ schedulable: false, reason: 'cordoned', cordoned: true });
    expect(withOperatorFlags(disk, { cordoned: false, draining: true }).reason).toBe('draining');
    expect(withOperatorFlags(disk, { cordoned: false, draining: false }).reason).toBe('disk watermark 90% >= 80%');
    expect(withOperatorFlags(view(), { cordoned: false, draining: false }).schedulable).toBe(true);
  });

  it('puts the disk watermark on the fuller of the sandbox store and the data dir', () => {
    const store = (usedPercent: number): StoreView => ({ kind: 'loop', path: '/d/store', sizeBytes: 100 * 2 ** 30, freeBytes: (100 - usedPercent) * 2 ** 30, usedPercent });
    const full = view({ disk: 20, store: store(85) });
    expect(full.usage).toMatchObject({ diskUsedPercent: 85, diskWatermarkPercent: 80, store: { kind: 'loop', usedPercent: 85 } });
    expect(full).toMatchObject({ schedulable: false, reason: 'disk watermark 85% >= 80%' });
    // A sparse image cannot grow on a full host disk: the data dir's filesystem counts too.
    expect(view({ disk: 90, store: store(5) })).toMatchObject({ schedulable: false, reason: 'disk watermark 90% >= 80%' });
    expect(view({ disk: 20, store: store(30) })).toMatchObject({ schedulable: true, usage: { diskUsedPercent: 30 } });
    expect(view({ disk: 20 }).usage.store).toBeUndefined();
  });

  it('names the limit a full node hits', () => {
    expect(unschedulableReason({ diskUsedPercent: 1, diskMaxPercent: 80, poolExhausted: false, headroom: 0, limitedBy: 'mvm_num', ceiling: 3000 })).toBe('sandbox cap reached (3000)');
    expect(unschedulableReason({ diskUsedPercent: 1, diskMaxPercent: 80, poolExhausted: false, headroom: 0, limitedBy: 'cpu', ceiling: 9 })).toBe('cpu ceiling reached');
  });
});

describe('host metrics parsing', () => {
  it('computes CPU utilisation from two /proc/stat samples, iowait counted as idle', () => {
    const a = parseProcStat('cpu  100 0 100 700 100 0 0 0 0 0\ncpu0 1 2 3');
    const b = parseProcStat('cpu  150 0 150 750 150 0 0 0 0 0\n');
    expect(cpuUtilPercent(a, b)).toBe(50);
    expect(cpuUtilPercent(a, a)).toBe(0);
  });
  it('reads MemTotal and MemAvailable in MiB', () => {
    expect(parseMeminfo('MemTotal:       2048000 kB\nMemFree: 1 kB\nMemAvailable:    1024000 kB\n')).toEqual({ totalMiB: 2000, availableMiB: 1000 });
  });
});
