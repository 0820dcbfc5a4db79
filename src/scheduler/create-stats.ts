// Create latencies (and, where timed, placement decision latencies) over a sliding minute, for
// /admin/v1/stats and the watch stream.
import type { StatsView } from '../api/types.js';
import { percentile } from '../bench/stats.js';

const WINDOW_MS = 60_000;

export class CreateStats {
  private samples: { at: number; ms: number }[] = [];
  private decisions: { at: number; ms: number }[] = [];

  record(ms: number, at = Date.now()): void {
    this.samples.push({ at, ms });
  }

  recordDecision(ms: number, at = Date.now()): void {
    this.decisions.push({ at, ms });
  }

  view(now = Date.now()): StatsView {
    const from = now - WINDOW_MS;
    this.samples = this.samples.filter((s) => s.at >= from);
    this.decisions = this.decisions.filter((s) => s.at >= from);
    const sorted = this.samples.map((s) => s.ms).sort((a, b) => a - b);
    const r1 = (x: number) => Math.round(x * 10) / 10;
    const view: StatsView = {
      createsLastMinute: sorted.length,
      createRatePerSec: r1(sorted.length / (WINDOW_MS / 1000)),
      createP50Ms: r1(percentile(sorted, 50)),
      createP99Ms: r1(percentile(sorted, 99)),
    };
    if (this.decisions.length === 0) return view;
    // Decisions take well under a millisecond: three decimals.
    const d = this.decisions.map((s) => s.ms).sort((a, b) => a - b);
    const r3 = (x: number) => Math.round(x * 1000) / 1000;
    return { ...view, decisionsLastMinute: d.length, decisionP50Ms: r3(percentile(d, 50)), decisionP99Ms: r3(percentile(d, 99)) };
  }
}
