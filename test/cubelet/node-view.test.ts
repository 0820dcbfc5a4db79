import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import type { PoolView, StoreView } from '../../src/api/types.js';
import { MasterConfigSchema } from '../../src/config/schema.js';
import { parseMeminfo, parseProcStat, cpuUtilPercent, sharedHostReadings } from '../../src/cubelet/host-metrics.js';
import { buildNodeView, withOperatorFlags } from '../../src/cubelet/node-view.js';
import { withSchedulability } from '../../src/control/schedulable.js';

const pool: PoolView = { free: 4, inUse: 0, creating: 0, total: 4, target: 4, inFlight: 0, onDemand: 0, waitP50Ms: 0, waitP99Ms: 0, recentWaitsMs: [] };
const spec = { cpus: 1, memoryMiB: 4096, diskGiB: 10 };
// The reference node of design.md: 128 cores, 251 GiB, default spec 1 vCPU / 4096 MiB.
const master = (ratio = 0) => MasterConfigSchema.parse({ host: { quota: { paused_resource_release_ratio: ratio } } });
const view = (
  over: {
    ratio?: number;
    running?: number;
    paused?: number;
    disk?: number;
    cpu?: number;
    store?: StoreView;
    pool?: Partial<PoolView>;
    tapPool?: Partial<PoolView>;
  } = {},
) =>
  buildNodeView({
    nodeID: 'n1',
    runtime: 'ns',
    capacity: { cpus: 128, memoryMiB: 251 * 1024, declared: true },
    cpuUtilPercent: over.cpu ?? 10,
    memAvailableMiB: 1000,
    diskUsedPercent: over.disk ?? 10,
    ...(over.store ? { store: over.store } : {}),
    master: master(over.ratio),
    sandboxes: [
      ...Array.from({ length: over.running ?? 0 }, () => ({ state: 'running' as const, spec })),
      ...Array.from({ length: over.paused ?? 0 }, () => ({ state: 'paused' as const, spec })),
    ],
    pool: { ...pool, ...over.pool },
    ...(over.tapPool ? { tapPool: { ...pool, ...over.tapPool } } : {}),
    poolSlotLimit: 16383,
    templates: ['host'],
    now: new Date(0),
  });
/** What operators see: the node's view with the scheduler's verdict for the default spec. */
const shown = (over: Parameters<typeof view>[0] = {}) => withSchedulability(view(over), 0, master(over.ratio), 0);

describe('node view', () => {
  it('sums the disk quotas of running and paused sandboxes (a paused layer stays)', () => {
    expect(view().usage.quotaDiskUsedGiB).toBe(0);
    expect(view({ running: 3, paused: 2 }).usage.quotaDiskUsedGiB).toBe(50);
    expect(view({ running: 3, paused: 2, ratio: 1 }).usage.quotaDiskUsedGiB).toBe(50);
    // What they count against: the store's size x host.quota.disk_oversell_ratio (20); none without a store.
    expect(view({ store: { kind: 'loop', path: '/d/store', sizeBytes: 12 * 1024 ** 3, freeBytes: 0, usedPercent: 0 } }).density.diskQuotaGiB).toBe(240);
    expect(view().density.diskQuotaGiB).toBeUndefined();
  });

  it('reproduces the reference density numbers', () => {
    expect(view().density).toMatchObject({ footprintMiB: 4202, paperCeiling: 117, safetyBoundary: 58, cpuCeiling: 307, bottleneck: 'memory', headroom: 117 });
    expect(view({ ratio: 0.75 }).density.allPausedCeiling).toBe(469);
  });

  // The verdict is the pipeline's (the words a refused create says), never the node's own partial check.
  it.each([
    [{ running: 100 }, 17, 0, true, '', undefined],
    [{ running: 100, paused: 20, ratio: 0 }, 0, 0, false, 'mem 120/117 (504240+4202 > 493568 MiB)', 'mem'],
    [{ running: 100, paused: 20, ratio: 0.75 }, 12, 63030, true, '', undefined],
    [{ running: 100, paused: 20, ratio: 1 }, 17, 84040, true, '', undefined],
    [{ disk: 83 }, 117, 0, false, 'disk 83% >= 80%', 'disk'],
    [{ cpu: 94.8 }, 117, 0, false, 'cpu util 94.8% >= 80%', 'cpu'],
    [{ pool: { free: 0, total: 16383 } }, 117, 0, false, 'pool exhausted', 'pool'],
  ] as const)('%o: headroom %i, released %i MiB, schedulable %s (%s)', (over, headroom, released, schedulable, reason, by) => {
    const v = shown(over);
    expect(v.density.headroom).toBe(headroom);
    expect(v.density.releasedMiB).toBe(released);
    expect([v.schedulable, v.reason, v.refusedBy]).toEqual([schedulable, reason, by]);
  });

  it('the node itself reports only the pool refusal the filters cannot see', () => {
    expect([view({ cpu: 99, disk: 99 }).schedulable, view({ pool: { free: 0, total: 16383 } }).reason]).toEqual([true, 'pool exhausted']);
  });

  it('reports the TAP pool of a node offering microvm; the range is exhausted only when every mode has no free slot', () => {
    expect(view().tapPool).toBeUndefined();
    expect(view({ tapPool: { free: 2, total: 2, target: 2 } }).tapPool).toMatchObject({ free: 2, total: 2, target: 2 });
    // The two pools share the node's range: both counted, and a free slot of either is not exhaustion.
    expect(view({ pool: { free: 0, total: 16000 }, tapPool: { free: 0, total: 383 } }).reason).toBe('pool exhausted');
    expect(view({ pool: { free: 0, total: 16000 }, tapPool: { free: 1, total: 383 } }).reason).toBe('');
    expect(view({ pool: { free: 0, total: 16000 }, tapPool: { free: 0, total: 100 } }).reason).toBe('');
  });

  it('operator flags come first and keep their words; the verdict comes back with them gone', () => {
    const disk = view({ disk: 90 });
    const verdict = (flags: { cordoned: boolean; draining: boolean }) => withSchedulability(withOperatorFlags(disk, flags), 0, master(), 0);
    expect(verdict({ cordoned: true, draining: false })).toMatchObject({ schedulable: false, reason: 'cordoned', cordoned: true, refusedBy: 'prefilter' });
    expect(verdict({ cordoned: false, draining: true }).reason).toBe('draining');
    expect(verdict({ cordoned: false, draining: false })).toMatchObject({ schedulable: false, reason: 'disk 90% >= 80%', refusedBy: 'disk' });
    expect(verdict({ cordoned: false, draining: false }).cordoned).toBe(false);
    expect(withSchedulability(withOperatorFlags(view(), { cordoned: false, draining: false }), 0, master(), 0)).not.toHaveProperty('refusedBy');
  });

  it('creates in flight at realtime_create_num make the node refuse, as the scheduler would', () => {
    expect(withSchedulability(view(), 100, master(), 0)).toMatchObject({
      schedulable: false,
      refusedBy: 'realtime_create_num',
      reason: 'creates in flight 100 >= 100',
    });
  });

  it('puts the disk watermark on the fuller of the sandbox store and the data dir', () => {
    const store = (usedPercent: number): StoreView => ({
      kind: 'loop',
      path: '/d/store',
      sizeBytes: 100 * 2 ** 30,
      freeBytes: (100 - usedPercent) * 2 ** 30,
      usedPercent,
    });
    const verdict = (v: ReturnType<typeof view>) => withSchedulability(v, 0, master(), 0);
    const full = view({ disk: 20, store: store(85) });
    expect(full.usage).toMatchObject({ diskUsedPercent: 85, diskWatermarkPercent: 80, store: { kind: 'loop', usedPercent: 85 } });
    expect(verdict(full)).toMatchObject({ schedulable: false, reason: 'disk 85% >= 80%', refusedBy: 'disk' });
    // A sparse image cannot grow on a full host disk: the data dir's filesystem counts too.
    expect(verdict(view({ disk: 90, store: store(5) }))).toMatchObject({ schedulable: false, reason: 'disk 90% >= 80%' });
    expect(verdict(view({ disk: 20, store: store(30) }))).toMatchObject({ schedulable: true, usage: { diskUsedPercent: 30 } });
    expect(view({ disk: 20 }).usage.store).toBeUndefined();
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
  it('shared readings: one disk figure for the dirs of one host, taken from the next dir asked once the first is gone', async () => {
    const root = mkdtempSync(join(tmpdir(), 'cube-host-readings-'));
    try {
      const [a, b] = [join(root, 'a'), join(root, 'b')];
      for (const d of [a, b]) mkdirSync(d);
      const host = sharedHostReadings(0); // read on every call
      const first = await host.diskUsedPercent(a);
      expect(first).toBeGreaterThanOrEqual(0);
      expect(await host.diskUsedPercent(b)).toBe(first);
      rmSync(a, { recursive: true });
      // Kept for the first dir until it fails: b's figure now, not a's ENOENT (read again: the figure may have moved).
      expect(await host.diskUsedPercent(b)).toBeGreaterThanOrEqual(0);
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  });
});
