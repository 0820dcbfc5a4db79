import { describe, expect, it } from 'vitest';
import { BenchOpError } from '../../src/bench/e2b-http.js';
import { runBench, seededRandom, type BenchConfig, type BenchOps } from '../../src/bench/runner.js';

// Ops that keep a ledger instead of talking to a daemon: these tests check the runner's
// bookkeeping (warm-up, error grouping, clean-up); the real API path is tested in bench-cli.test.ts.
function ledgerOps(failEvery = 0) {
  const live = new Set<string>();
  const calls: string[] = [];
  let n = 0;
  const ops: BenchOps = {
    async create() {
      n++;
      if (failEvery && n % failEvery === 0) throw new BenchOpError('130597', 'no node available');
      const id = `sb${n}`;
      live.add(id);
      calls.push(`create ${id}`);
      return id;
    },
    async kill(id) {
      live.delete(id);
      calls.push(`kill ${id}`);
    },
    async exec(id) {
      calls.push(`exec ${id}`);
    },
    async pause(id) {
      calls.push(`pause ${id}`);
    },
    async resume(id) {
      calls.push(`resume ${id}`);
    },
  };
  return { ops, live, calls };
}

const base: BenchConfig = { mode: 'create-delete', concurrency: 3, count: 10, warmup: 2, workload: 'burst', seed: 1 };

describe('runBench', () => {
  it.each(['create-only', 'create-delete', 'create-exec-delete', 'pause-resume'] as const)(
    '%s: measures count iterations after warm-up and leaves nothing alive',
    async (mode) => {
      const { ops, live, calls } = ledgerOps();
      const r = await runBench({ ...base, mode }, ops);
      expect(r.summary.count).toBe(10);
      expect(r.summary.success).toBe(10);
      expect(live.size).toBe(0);
      expect(calls.filter((c) => c.startsWith('create')).length).toBe(12);
      if (mode === 'create-exec-delete') expect(r.phases.exec!.p50).toBeGreaterThanOrEqual(0);
      if (mode === 'pause-resume') expect(Object.keys(r.phases)).toEqual(expect.arrayContaining(['pause', 'resume']));
      if (mode !== 'create-only') expect(r.phases.delete).toBeDefined();
    },
  );

  it('groups failures by code and lowers the success rate', async () => {
    const { ops } = ledgerOps(4);
    const r = await runBench({ ...base, warmup: 0, count: 8 }, ops);
    expect(r.errors).toEqual({ '130597': 2 });
    expect(r.errorMessages).toEqual({ '130597': 'no node available' });
    expect(r.summary.successRate).toBe(0.75);
    expect(r.grade).toBe('D');
  });

  it('steady workload issues the same number of operations with a queue phase', async () => {
    const { ops, live } = ledgerOps();
    const r = await runBench({ ...base, workload: 'steady', rate: 2000, count: 6, warmup: 0 }, ops);
    expect(r.summary.success).toBe(6);
    expect(r.phases.queue).toBeDefined();
    expect(live.size).toBe(0);
  });

  it('seeded random sequences repeat', () => {
    const a = seededRandom(42);
    const b = seededRandom(42);
    const xs = [a(), a(), a()];
    expect([b(), b(), b()]).toEqual(xs);
    expect(xs.every((x) => x >= 0 && x < 1)).toBe(true);
    expect(seededRandom(43)()).not.toBe(xs[0]);
  });
});
