// E2B sandbox metrics (`GET /sandboxes/{id}/metrics?start&end`, SDK getMetrics, CLI `sandbox
// metrics`): a short per-sandbox history. The first request for a sandbox answers one sample
// measured then and starts sampling it every SAMPLE_MS; later requests get the samples inside
// [start, end]. A sandbox nobody asked about for FORGET_MS, or that is gone, is forgotten, so
// idle sandboxes cost little (a sample reads a few cgroup files and the quota group's usage;
// it walked the writable layer before, on this timer). A round still running skips the next.
import type { SandboxStats } from '../../runtime/types.js';

export const SAMPLE_MS = 5_000;
const KEEP = 120; // 10 minutes at 5 s
const FORGET_MS = 10 * 60_000;
/** CPU is measured over this much when there is no previous sample to compare with. */
export const FIRST_CPU_MS = 200;

/** The SDK's `SandboxMetric`. */
export interface Metric {
  timestamp: string;
  timestampUnix: number;
  cpuCount: number;
  cpuUsedPct: number;
  memUsed: number;
  memTotal: number;
  memCache: number;
  diskUsed: number;
  diskTotal: number;
}

/** One sample from two readings of the sandbox's counters (pure). */
export function metricOf(prev: { at: number; cpuUsageNs: number }, cur: SandboxStats, at: number, spec: { cpus: number; diskGiB: number }): Metric {
  const dtMs = Math.max(1, at - prev.at);
  const cpuUsedPct = Math.max(0, Math.min(100, ((cur.cpuUsageNs - prev.cpuUsageNs) / (dtMs * 1e6 * spec.cpus)) * 100));
  return {
    timestamp: new Date(at).toISOString(),
    timestampUnix: Math.floor(at / 1000),
    cpuCount: spec.cpus,
    cpuUsedPct: Math.round(cpuUsedPct * 100) / 100,
    memUsed: cur.memoryBytes,
    memTotal: cur.memoryLimitBytes,
    memCache: cur.memoryCacheBytes ?? 0,
    diskUsed: cur.diskUsedBytes ?? 0,
    diskTotal: Math.round(spec.diskGiB * 1024 ** 3),
  };
}

/** Samples of [startSec, endSec] (unix seconds, both optional), oldest first (pure). */
export function within(samples: Metric[], startSec?: number, endSec?: number): Metric[] {
  return samples.filter((m) => (startSec === undefined || m.timestampUnix >= startSec) && (endSec === undefined || m.timestampUnix <= endSec));
}

interface Tracked {
  samples: Metric[];
  last: { at: number; cpuUsageNs: number };
  askedAt: number;
  spec: { cpus: number; diskGiB: number };
  read: () => Promise<SandboxStats>;
}

export class MetricsHistory {
  private readonly tracked = new Map<string, Tracked>();
  private timer?: NodeJS.Timeout;
  private sampling = false;

  /** The samples of [start, end]; the first call for a sandbox measures one now and starts its history. */
  async query(
    sandboxID: string,
    spec: { cpus: number; diskGiB: number },
    read: () => Promise<SandboxStats>,
    startSec?: number,
    endSec?: number,
  ): Promise<Metric[]> {
    let t = this.tracked.get(sandboxID);
    if (!t) {
      const a = await read();
      const at0 = Date.now();
      await new Promise((r) => setTimeout(r, FIRST_CPU_MS));
      const b = await read();
      const at = Date.now();
      t = { samples: [metricOf({ at: at0, cpuUsageNs: a.cpuUsageNs }, b, at, spec)], last: { at, cpuUsageNs: b.cpuUsageNs }, askedAt: at, spec, read };
      this.tracked.set(sandboxID, t);
      this.arm();
    }
    t.askedAt = Date.now();
    t.read = read;
    return within(t.samples, startSec, endSec);
  }

  stop(): void {
    clearInterval(this.timer);
    this.timer = undefined;
    this.tracked.clear();
  }

  private arm(): void {
    if (this.timer) return;
    this.timer = setInterval(() => void this.sampleAll(), SAMPLE_MS);
    this.timer.unref();
  }

  private async sampleAll(): Promise<void> {
    if (this.sampling) return;
    this.sampling = true;
    try {
      await this.sampleRound();
    } finally {
      this.sampling = false;
    }
  }

  private async sampleRound(): Promise<void> {
    const now = Date.now();
    await Promise.all(
      [...this.tracked].map(async ([id, t]) => {
        if (now - t.askedAt > FORGET_MS) return void this.tracked.delete(id);
        // A failed read (sandbox gone, node away) ends the history like a paused sandbox does.
        const cur = await t.read().catch(() => undefined);
        if (!cur) return void this.tracked.delete(id); // gone, or paused: its history ends here
        const at = Date.now();
        t.samples.push(metricOf(t.last, cur, at, t.spec));
        if (t.samples.length > KEEP) t.samples.shift();
        t.last = { at, cpuUsageNs: cur.cpuUsageNs };
      }),
    );
    if (this.tracked.size === 0) this.stop();
  }
}
