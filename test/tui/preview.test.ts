// The release-ratio preview is the daemon's computation (issue 16: `headroom 117 -> 112` at the
// ratio in force while the daemon said 117, with 128 MiB sandboxes counted at the default spec).
import { describe, expect, it } from 'vitest';
import type { PoolView } from '../../src/api/types.js';
import { nodeWire } from '../../src/api/admin/wire.js';
import { MasterConfigSchema } from '../../src/config/schema.js';
import { buildNodeView } from '../../src/cubelet/node-view.js';
import { computeHeadroom, densityParamsFromConfig } from '../../src/model/density.js';
import { previewReleaseRatio } from '../../src/tui/actions.js';

const pool: PoolView = { free: 4, inUse: 0, creating: 0, total: 4, target: 4, inFlight: 0, onDemand: 0, waitP50Ms: 0, waitP99Ms: 0, recentWaitsMs: [] };
const master = (ratio: number) => MasterConfigSchema.parse({ host: { quota: { paused_resource_release_ratio: ratio } } });
const small = { cpus: 1, memoryMiB: 128, diskGiB: 1 };
const big = { cpus: 2, memoryMiB: 8192, diskGiB: 1 };
/** The reference node (128 cpus, 251 GiB) with 128 MiB and 8 GiB sandboxes, as the daemon computes it at `ratio` and the console reads it. */
const node = (ratio: number) =>
  nodeWire(
    buildNodeView({
      nodeID: 'n1',
      runtime: 'ns',
      capacity: { cpus: 128, memoryMiB: 251 * 1024, declared: true },
      cpuUtilPercent: 10,
      memAvailableMiB: 100_000,
      diskUsedPercent: 10,
      master: master(ratio),
      sandboxes: [
        ...Array.from({ length: 30 }, () => ({ state: 'running' as const, spec: small })),
        ...Array.from({ length: 40 }, () => ({ state: 'paused' as const, spec: small })),
        ...Array.from({ length: 10 }, () => ({ state: 'paused' as const, spec: big })),
        ...Array.from({ length: 5 }, () => ({ state: 'running' as const, spec: big })),
      ],
      pool,
      poolSlotLimit: 16383,
      templates: ['host'],
      now: new Date(0),
    }),
  );

const figures = (text: string) => {
  const m = /all paused (\d+) -> (\d+), frees ([\d.]+\w+) -> ([\d.]+\w+), headroom (\d+) -> (\d+)/.exec(text);
  if (!m) throw new Error(`no preview figures in ${text}`);
  return { allPaused: [Number(m[1]), Number(m[2])], frees: [m[3], m[4]], headroom: [Number(m[5]), Number(m[6])] };
};

describe('release ratio preview', () => {
  it.each([
    [0.5, 0.5],
    [0.5, 0.25],
    [0.5, 1],
    [0.75, 0],
    [0, 0.9],
  ])('from %s to %s gives what the daemon computes at the new ratio', (from, to) => {
    const now = node(from);
    const then = node(to);
    const f = figures(previewReleaseRatio(now, master(from), to));
    expect(f.headroom).toEqual([now.density.headroom, then.density.headroom]);
    expect(f.allPaused).toEqual([now.density.allPausedCeiling, then.density.allPausedCeiling]);
    expect(f.frees[1]).toBe(figures(previewReleaseRatio(then, master(to), to)).frees[1]);
  });

  it('is not what counting every sandbox at the default spec gives (what the preview did)', () => {
    const m = master(0.25);
    const n = node(0.5);
    const spec = { cpus: m.sandbox.default_spec.cpus, memoryMiB: m.sandbox.default_spec.memory_mib };
    const byCount = computeHeadroom(n.capacity, densityParamsFromConfig(m), spec, { running: n.sandboxes.running, paused: n.sandboxes.paused });
    expect(byCount.headroom).not.toBe(node(0.25).density.headroom);
  });
});
