// Create latencies (and, where timed, placement decision latencies) over a sliding minute, for
// /admin/v1/stats and the watch stream.
import { percentile } from '../model/stats.js';
import type { StatsView } from '../model/watch.js';

const WINDOW_MS = 60_000;

export class CreateStats {
  private samples: { at: number; ms: number }[] = [];
  private decisions: { at: number; ms: number }[] = [];
  private refusals: { at: number; code: number; rule: string }[] = [];
  /** Refusals since the process started, by `code/rule`: a Prometheus counter must never go down. */
  private readonly refusedTotals = new Map<string, { code: number; rule: string; count: number }>();

  record(ms: number, at = Date.now()): void {
    this.samples.push({ at, ms });
  }

  recordDecision(ms: number, at = Date.now()): void {
    this.decisions.push({ at, ms });
  }

  /** A create (130597) or resume (130409) refused, with the rule that refused: triage marks creates being refused BAD. */
  recordRefusal(code: number, rule: string, at = Date.now()): void {
    this.refusals.push({ at, code, rule });
    const k = `${code}/${rule}`;
    const t = this.refusedTotals.get(k) ?? { code, rule, count: 0 };
    t.count++;
    this.refusedTotals.set(k, t);
  }

  view(now = Date.now()): StatsView {
    const from = now - WINDOW_MS;
    this.samples = this.samples.filter((s) => s.at >= from);
    this.decisions = this.decisions.filter((s) => s.at >= from);
    this.refusals = this.refusals.filter((s) => s.at >= from);
    const sorted = this.samples.map((s) => s.ms).sort((a, b) => a - b);
    const r1 = (x: number) => Math.round(x * 10) / 10;
    const view: StatsView = {
      createsLastMinute: sorted.length,
      createRatePerSec: r1(sorted.length / (WINDOW_MS / 1000)),
      createP50Ms: r1(percentile(sorted, 50)),
      createP99Ms: r1(percentile(sorted, 99)),
    };
    if (this.refusals.length > 0) {
      const by = new Map<string, { code: number; rule: string; count: number }>();
      for (const r of this.refusals) {
        const k = `${r.code}/${r.rule}`;
        const e = by.get(k) ?? { code: r.code, rule: r.rule, count: 0 };
        e.count++;
        by.set(k, e);
      }
      view.refusedLastMinute = [...by.values()].sort((a, b) => b.count - a.count);
    }
    if (this.refusedTotals.size > 0) view.refusedSinceStart = [...this.refusedTotals.values()].map((t) => ({ ...t }));
    if (this.decisions.length === 0) return view;
    // Decisions take well under a millisecond: three decimals.
    const d = this.decisions.map((s) => s.ms).sort((a, b) => a - b);
    const r3 = (x: number) => Math.round(x * 1000) / 1000;
    return { ...view, decisionsLastMinute: d.length, decisionP50Ms: r3(percentile(d, 50)), decisionP99Ms: r3(percentile(d, 99)) };
  }
}
