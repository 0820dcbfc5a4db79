import { describe, expect, it } from 'vitest';
import { compare, grade, histogram, summarize, summarizeLatencies, type BenchResult } from '../../src/bench/stats.js';
import { percentile } from '../../src/model/stats.js';

describe('percentile (nearest rank)', () => {
  it.each([
    [[], 50, 0],
    [[7], 99, 7],
    [[1, 2, 3, 4, 5, 6, 7, 8, 9, 10], 50, 5],
    [[1, 2, 3, 4, 5, 6, 7, 8, 9, 10], 90, 9],
    [[1, 2, 3, 4, 5, 6, 7, 8, 9, 10], 99, 10],
    [[1, 2, 3, 4, 5, 6, 7, 8, 9, 10], 0, 1],
  ])('%j p%d = %d', (xs, p, want) => {
    expect(percentile(xs, p)).toBe(want);
  });
});

describe('summaries', () => {
  it('computes min/avg/std/max and ignores input order', () => {
    const s = summarizeLatencies([4, 2, 8, 6]);
    expect(s).toMatchObject({ min: 2, max: 8, avg: 5, p50: 4 });
    expect(s.std).toBeCloseTo(Math.sqrt(5));
  });
  it('counts failures in the success rate, not in throughput', () => {
    const s = summarize([10, 20, 30], 1, 2);
    expect(s).toMatchObject({ count: 4, success: 3, failed: 1, successRate: 0.75, throughputPerSec: 1.5 });
  });
  it('an empty run is all zeros, not NaN', () => {
    const s = summarize([], 0, 0);
    expect(s.successRate).toBe(0);
    expect(s.throughputPerSec).toBe(0);
    expect(s.latencyMs.avg).toBe(0);
  });
});

describe('grade', () => {
  it.each([
    [100, 1, 'S'],
    [100.1, 1, 'A'],
    [200, 1, 'A'],
    [500, 1, 'B'],
    [1000, 1, 'C'],
    [1001, 1, 'D'],
    [50, 0.999, 'S'],
    [50, 0.998, 'A'],
    [50, 0.98, 'B'],
    [700, 0.98, 'C'],
    [50, 0.9, 'C'],
    [50, 0.89, 'D'],
  ])('p99 %d ms at success %d -> %s', (p99, rate, want) => {
    expect(grade(p99, rate)).toBe(want);
  });
});

describe('histogram', () => {
  it('puts each latency in the first bucket whose bound holds it', () => {
    const h = histogram([1, 5, 6, 1000, 99999], [5, 10, 1000]);
    expect(h.map((b) => b.count)).toEqual([2, 1, 1, 1]);
    expect(h.at(-1)!.leMs).toBe(Infinity);
  });
});

describe('compare', () => {
  const result = (tput: number, p99: number): BenchResult => ({
    summary: summarize([p99], 0, 1 / tput),
    errors: {},
    grade: 'S',
    histogram: [],
    config: {},
    startedAt: '',
  });
  it('gives b/a ratios and says which side is better per metric', () => {
    const rows = compare(result(10, 100), result(20, 50));
    const t = rows.find((r) => r.metric === 'throughputPerSec')!;
    const p = rows.find((r) => r.metric === 'p99')!;
    expect(t.ratio).toBeCloseTo(2);
    expect(t.better).toBe(true);
    expect(p.ratio).toBeCloseTo(0.5);
    expect(p.better).toBe(true);
  });
});
