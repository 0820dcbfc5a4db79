// Allocation wait times for the pool gauges: percentiles over the last RECENT_MS (bounded),
// and the last few values for the console's sparkline; on-demand allocations counted over the
// same window. Windowed so that a stall that is over stops showing (triage read counts since
// start: a NIC stall stayed WARN until a restart). Pure apart from the clock default.
import { percentile } from '../model/stats.js';

/** What "recent" means for pool waits and on-demand allocations (triage and /metrics read it). */
export const RECENT_MS = 5 * 60_000;

/** How long a summary is reused while no wait was recorded: the window's edge moves by that at most. */
const SUMMARY_REUSE_MS = 1000;

export class WaitWindow {
  private readonly values: { at: number; ms: number }[] = [];
  /**
   * The last summary: every node view (so every create's placement in role all) asked for one,
   * a filter and sort of up to 1,024 values (1.3% of cubed's CPU in the rollout loop).
   */
  private last?: { at: number; summary: ReturnType<WaitWindow['summary']> };

  constructor(
    private readonly size = 1024,
    private readonly recentSize = 32,
  ) {}

  record(ms: number, at = Date.now()): void {
    this.values.push({ at, ms: Math.round(ms * 100) / 100 });
    if (this.values.length > this.size) this.values.shift();
    this.last = undefined;
  }

  summary(now = Date.now()): { waitP50Ms: number; waitP99Ms: number; recentWaitsMs: number[] } {
    if (this.last && now >= this.last.at && now - this.last.at < SUMMARY_REUSE_MS) return this.last.summary;
    const from = now - RECENT_MS;
    const sorted = this.values
      .filter((v) => v.at >= from)
      .map((v) => v.ms)
      .sort((a, b) => a - b);
    const summary = {
      waitP50Ms: percentile(sorted, 50),
      waitP99Ms: percentile(sorted, 99),
      recentWaitsMs: this.values.slice(-this.recentSize).map((v) => v.ms),
    };
    this.last = { at: now, summary };
    return summary;
  }
}

/** How many times something happened in the last RECENT_MS. */
export class RecentCount {
  private at: number[] = [];

  record(at = Date.now()): void {
    this.at.push(at);
  }

  count(now = Date.now()): number {
    const from = now - RECENT_MS;
    if (this.at.length > 0 && this.at[0]! < from) this.at = this.at.filter((t) => t >= from);
    return this.at.length;
  }
}
