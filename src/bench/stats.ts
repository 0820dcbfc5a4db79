// Pure statistics for `cubectl bench`: the summary, histogram, grade and comparison that
// the JSON result file carries, so runs can be compared by scripts.
import { percentile } from '../model/stats.js';

export interface LatencySummary {
  min: number;
  avg: number;
  std: number;
  p50: number;
  p90: number;
  p95: number;
  p99: number;
  max: number;
}

export interface Summary {
  count: number;
  success: number;
  failed: number;
  successRate: number;
  durationSec: number;
  throughputPerSec: number;
  latencyMs: LatencySummary;
}

export type Grade = 'S' | 'A' | 'B' | 'C' | 'D';

export interface HistogramBucket {
  /** Upper bound in ms (Infinity for the last bucket). */
  leMs: number;
  count: number;
}

export function summarizeLatencies(latencies: readonly number[]): LatencySummary {
  if (latencies.length === 0) return { min: 0, avg: 0, std: 0, p50: 0, p90: 0, p95: 0, p99: 0, max: 0 };
  const sorted = [...latencies].sort((a, b) => a - b);
  const avg = sorted.reduce((s, x) => s + x, 0) / sorted.length;
  const variance = sorted.reduce((s, x) => s + (x - avg) ** 2, 0) / sorted.length;
  return {
    min: sorted[0]!,
    avg,
    std: Math.sqrt(variance),
    p50: percentile(sorted, 50),
    p90: percentile(sorted, 90),
    p95: percentile(sorted, 95),
    p99: percentile(sorted, 99),
    max: sorted[sorted.length - 1]!,
  };
}

export function summarize(latencies: readonly number[], failed: number, durationSec: number): Summary {
  const success = latencies.length;
  const count = success + failed;
  return {
    count,
    success,
    failed,
    successRate: count === 0 ? 0 : success / count,
    durationSec,
    throughputPerSec: durationSec > 0 ? success / durationSec : 0,
    latencyMs: summarizeLatencies(latencies),
  };
}

const BUCKETS_MS = [5, 10, 20, 30, 50, 75, 100, 150, 200, 300, 500, 1000, 2000, 5000];

export function histogram(latencies: readonly number[], bounds: readonly number[] = BUCKETS_MS): HistogramBucket[] {
  const buckets = [...bounds, Infinity].map((leMs) => ({ leMs, count: 0 }));
  for (const x of latencies) buckets.find((b) => x <= b.leMs)!.count++;
  return buckets;
}

const GRADES: readonly Grade[] = ['S', 'A', 'B', 'C', 'D'];

/**
 * The reference cube-bench grade: the worse of the p99 grade (S <= 100 ms, A <= 200, B <= 500,
 * C <= 1000, D above) and the success-rate grade (S >= 99.9%, A >= 99%, B >= 95%, C >= 90%).
 */
export function grade(p99Ms: number, successRate: number): Grade {
  const byLatency = p99Ms <= 100 ? 0 : p99Ms <= 200 ? 1 : p99Ms <= 500 ? 2 : p99Ms <= 1000 ? 3 : 4;
  const bySuccess = successRate >= 0.999 ? 0 : successRate >= 0.99 ? 1 : successRate >= 0.95 ? 2 : successRate >= 0.9 ? 3 : 4;
  return GRADES[Math.max(byLatency, bySuccess)]!;
}

export interface BenchResult {
  summary: Summary;
  errors: Record<string, number>;
  /** The first message seen for each code in `errors`: a rare failure in a long run says what it was. */
  errorMessages?: Record<string, string>;
  grade: Grade;
  histogram: HistogramBucket[];
  config: Record<string, unknown>;
  startedAt: string;
}

export interface CompareRow {
  metric: string;
  a: number;
  b: number;
  /** b / a (NaN-free: 0 when a is 0). */
  ratio: number;
  /** Whether b is better than a for this metric. */
  better: boolean;
}

const LOWER_IS_BETTER = new Set(['min', 'avg', 'p50', 'p90', 'p95', 'p99', 'max']);

export function compare(a: BenchResult, b: BenchResult): CompareRow[] {
  const row = (metric: string, x: number, y: number): CompareRow => ({
    metric,
    a: x,
    b: y,
    ratio: x === 0 ? 0 : y / x,
    better: LOWER_IS_BETTER.has(metric) ? y < x : y > x,
  });
  const rows = [
    row('throughputPerSec', a.summary.throughputPerSec, b.summary.throughputPerSec),
    row('successRate', a.summary.successRate, b.summary.successRate),
  ];
  for (const k of Object.keys(a.summary.latencyMs) as (keyof LatencySummary)[]) {
    if (k === 'std') continue;
    rows.push(row(k, a.summary.latencyMs[k], b.summary.latencyMs[k]));
  }
  return rows;
}
