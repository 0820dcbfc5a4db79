// Allocation wait times for the pool gauges: percentiles over a bounded window and the
// last few values for the console's sparkline. Pure.
import { percentile } from '../bench/stats.js';

export class WaitWindow {
  private readonly values: number[] = [];

  constructor(
    private readonly size = 1024,
    private readonly recentSize = 32,
  ) {}

  record(ms: number): void {
    this.values.push(Math.round(ms * 100) / 100);
    if (this.values.length > this.size) this.values.shift();
  }

  summary(): { waitP50Ms: number; waitP99Ms: number; recentWaitsMs: number[] } {
    const sorted = [...this.values].sort((a, b) => a - b);
    return {
      waitP50Ms: percentile(sorted, 50),
      waitP99Ms: percentile(sorted, 99),
      recentWaitsMs: this.values.slice(-this.recentSize),
    };
  }
}
