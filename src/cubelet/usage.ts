// A sandbox's live use from two readings of its cgroup counters (pure): what the console's
// sandboxes view shows per row. The node keeps its previous reading per sandbox, so CPU is the
// share of the sandbox's own vCPUs used between the console's polls (about 2 s apart).
import type { SandboxUsage, SandboxView } from '../model/sandbox.js';
import type { SandboxStats } from '../runtime/types.js';

/** Readings closer together than this give no CPU figure (too noisy to show). */
export const MIN_CPU_WINDOW_MS = 100;

export interface CpuReading {
  at: number;
  cpuUsageNs: number;
}

/** CPU percent of `cpus` between two readings, 0..100 (one decimal); undefined without a usable previous one. */
export function cpuPercentBetween(prev: CpuReading | undefined, cur: CpuReading, cpus: number): number | undefined {
  if (!prev || cur.at - prev.at < MIN_CPU_WINDOW_MS || cur.cpuUsageNs < prev.cpuUsageNs) return undefined;
  const pct = ((cur.cpuUsageNs - prev.cpuUsageNs) / ((cur.at - prev.at) * 1e6 * Math.max(cpus, 0.01))) * 100;
  return Math.round(Math.min(100, Math.max(0, pct)) * 10) / 10;
}

/** One usage record from a reading, the previous CPU reading, the sampled disk use and the link counters (host side: its rx is the sandbox's tx). */
export function usageOf(
  view: SandboxView,
  s: SandboxStats,
  cur: CpuReading,
  prev: CpuReading | undefined,
  link: { rx: number; tx: number } | undefined,
): SandboxUsage {
  const cpuPercent = cpuPercentBetween(prev, cur, view.spec.cpus);
  return {
    sandboxID: view.sandboxID,
    ...(cpuPercent === undefined ? {} : { cpuPercent }),
    memoryBytes: s.memoryBytes,
    memoryLimitBytes: s.memoryLimitBytes,
    pids: s.pids,
    ...(view.diskUsedBytes === undefined ? {} : { diskUsedBytes: view.diskUsedBytes }),
    diskLimitBytes: Math.round(view.spec.diskGiB * 2 ** 30),
    ...(link ? { netRxBytes: link.tx, netTxBytes: link.rx } : {}),
  };
}
