// The console's per-sandbox use from two cgroup readings (src/cubelet/usage.ts).
import { describe, expect, it } from 'vitest';
import { cpuPercentBetween, usageOf } from '../../src/cubelet/usage.js';
import type { SandboxView } from '../../src/model/sandbox.js';

describe('sandbox usage', () => {
  it('is CPU of the sandbox own vCPUs between readings, none without a usable previous one', () => {
    // 2 vCPUs, 1 s apart, 1 s of CPU used: half of them.
    expect(cpuPercentBetween({ at: 0, cpuUsageNs: 0 }, { at: 1000, cpuUsageNs: 1e9 }, 2)).toBe(50);
    expect(cpuPercentBetween(undefined, { at: 1000, cpuUsageNs: 1e9 }, 2)).toBeUndefined();
    // Too close together, or a counter that went back (a new cgroup): no figure.
    expect(cpuPercentBetween({ at: 990, cpuUsageNs: 0 }, { at: 1000, cpuUsageNs: 1e6 }, 1)).toBeUndefined();
    expect(cpuPercentBetween({ at: 0, cpuUsageNs: 5e9 }, { at: 1000, cpuUsageNs: 1e9 }, 1)).toBeUndefined();
    // Never above 100.
    expect(cpuPercentBetween({ at: 0, cpuUsageNs: 0 }, { at: 1000, cpuUsageNs: 4e9 }, 1)).toBe(100);
  });

  it('takes the sandbox side of its link (the host side receives what it sends) and its sampled disk use', () => {
    const view = { sandboxID: 's', spec: { cpus: 1, memoryMiB: 256, diskGiB: 1 }, diskUsedBytes: 4096 } as SandboxView;
    const u = usageOf(
      view,
      { memoryBytes: 10, memoryLimitBytes: 256 * 2 ** 20, cpuUsageNs: 2e9, pids: 3, oomKills: 0 },
      { at: 2000, cpuUsageNs: 2e9 },
      { at: 1000, cpuUsageNs: 1.5e9 },
      { rx: 100, tx: 7 },
    );
    expect(u).toEqual({
      sandboxID: 's',
      cpuPercent: 50,
      memoryBytes: 10,
      memoryLimitBytes: 256 * 2 ** 20,
      pids: 3,
      diskUsedBytes: 4096,
      diskLimitBytes: 2 ** 30,
      netRxBytes: 7,
      netTxBytes: 100,
    });
  });
});
