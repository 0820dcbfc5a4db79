// Create latencies over a sliding minute, for /admin/v1/stats and the watch stream.
import type { StatsView } from '../api/types.js';
import { percentile } from '../bench/stats.js';

const WINDOW_MS = 60_000;

export class CreateStats {
  private samples: { at: number; ms: number }[] = [];

  record(ms: number, at = Date.now()): void {
    this.samples.push({ at, ms });
  }

  view(now = Date.now()): StatsView {
    const from = now - WINDOW_MS;
    this.samples = this.samples.filter((s) => s.at >= from);
    const sorted = this.samples.map((s) => s.ms).sort((a, b) => a - b);
    const r1 = (x: number) => Math.round(x * 10) / 10;
    return {
      createsLastMinute: sorted.length,
      createRatePerSec: r1(sorted.length / (WINDOW_MS / 1000)),
      createP50Ms: r1(percentile(sorted, 50)),
      createP99Ms: r1(percentile(sorted, 99)),
    };
  }
}
