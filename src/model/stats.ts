// Pure statistics shared by the daemon's rolling figures (pool waits, create and decision times)
// and the benchmarks (src/bench/stats.ts).

/** Nearest-rank percentile of a sorted array (p in 0..100). */
export function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return 0;
  const rank = Math.ceil((p / 100) * sorted.length);
  return sorted[Math.min(sorted.length - 1, Math.max(0, rank - 1))]!;
}
