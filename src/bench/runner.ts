// Drives one benchmark run: a closed-loop burst (c workers) or an open-loop steady arrival
// process (seeded Poisson at --rate, at most c in flight), warm-up iterations discarded.
import { performance } from 'node:perf_hooks';
import { BenchOpError } from './e2b-http.js';
import { histogram, grade, summarize, summarizeLatencies, type BenchResult, type LatencySummary } from './stats.js';

export { BENCH_MODES, type BenchMode } from './modes.js';
import type { BenchMode } from './modes.js';

export interface BenchOps {
  create(): Promise<string>;
  kill(id: string): Promise<void>;
  exec(id: string): Promise<void>;
  pause(id: string): Promise<void>;
  resume(id: string): Promise<void>;
}

export interface BenchConfig {
  mode: BenchMode;
  concurrency: number;
  count: number;
  warmup: number;
  workload: 'burst' | 'steady';
  /** Arrivals per second for the steady workload. */
  rate?: number;
  /** Seconds a sandbox lives between create and delete. */
  lifetimeSec?: number;
  seed: number;
}

export interface Progress {
  done: number;
  total: number;
  ok: number;
  failed: number;
}

export interface RunResult extends BenchResult {
  /** Every phase that was timed, e.g. create, exec, delete, pause, resume, queue. */
  phases: Record<string, LatencySummary>;
}

/** mulberry32: small, seedable, good enough to make request sequences repeatable. */
export function seededRandom(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function errorCode(e: unknown): string {
  return e instanceof BenchOpError ? e.code : (e instanceof Error && e.name) || 'error';
}

export async function runBench(cfg: BenchConfig, ops: BenchOps, onProgress?: (p: Progress) => void): Promise<RunResult> {
  const startedAt = new Date().toISOString();
  const total = cfg.warmup + cfg.count;
  const phases: Record<string, number[]> = {};
  const primary: number[] = [];
  const errors: Record<string, number> = {};
  const errorMessages: Record<string, string> = {};
  const leftovers = new Set<string>();
  let failed = 0;
  let done = 0;
  let measuredStart = 0;
  let measuredEnd = 0;

  const time = async <T>(phase: string, measured: boolean, f: () => Promise<T>): Promise<T> => {
    const t0 = performance.now();
    const v = await f();
    if (measured) (phases[phase] ??= []).push(performance.now() - t0);
    return v;
  };

  const iteration = async (i: number): Promise<void> => {
    const measured = i >= cfg.warmup;
    if (measured && measuredStart === 0) measuredStart = performance.now();
    let id: string | undefined;
    try {
      const t0 = performance.now();
      id = await time('create', measured, () => ops.create());
      leftovers.add(id);
      let primaryMs = performance.now() - t0;
      if (cfg.mode === 'pause-resume') {
        const p0 = performance.now();
        await time('pause', measured, () => ops.pause(id!));
        await time('resume', measured, () => ops.resume(id!));
        primaryMs = performance.now() - p0;
      }
      if (cfg.mode === 'create-exec-delete') await time('exec', measured, () => ops.exec(id!));
      if (cfg.lifetimeSec) await sleep(cfg.lifetimeSec * 1000);
      if (cfg.mode !== 'create-only') {
        await time('delete', measured, () => ops.kill(id!));
        leftovers.delete(id);
      }
      if (measured) primary.push(primaryMs);
    } catch (e) {
      if (measured) {
        failed++;
        const code = errorCode(e);
        errors[code] = (errors[code] ?? 0) + 1;
        errorMessages[code] ??= e instanceof Error ? e.message : String(e);
      }
    } finally {
      if (measured) measuredEnd = performance.now();
      done++;
      onProgress?.({ done, total, ok: primary.length, failed });
    }
  };

  if (cfg.workload === 'burst') {
    let next = 0;
    const worker = async () => {
      while (next < total) await iteration(next++);
    };
    await Promise.all(Array.from({ length: Math.min(cfg.concurrency, total) }, worker));
  } else {
    const rate = cfg.rate ?? 10;
    const rand = seededRandom(cfg.seed);
    let inFlight = 0;
    const waiters: (() => void)[] = [];
    const started: Promise<void>[] = [];
    const t0 = performance.now();
    let at = 0;
    for (let i = 0; i < total; i++) {
      at += (-Math.log(1 - rand()) / rate) * 1000;
      const wait = at - (performance.now() - t0);
      if (wait > 0) await sleep(wait);
      const q0 = performance.now();
      while (inFlight >= cfg.concurrency) await new Promise<void>((r) => waiters.push(r));
      if (i >= cfg.warmup) (phases['queue'] ??= []).push(performance.now() - q0);
      inFlight++;
      started.push(
        iteration(i).finally(() => {
          inFlight--;
          waiters.shift()?.();
        }),
      );
    }
    await Promise.all(started);
  }

  // create-only leaves sandboxes alive by design; a failed iteration may have left one too.
  await Promise.all([...leftovers].map((id) => ops.kill(id).catch(() => undefined)));

  const durationSec = measuredStart === 0 ? 0 : (measuredEnd - measuredStart) / 1000;
  const summary = summarize(primary, failed, durationSec);
  return {
    summary,
    errors,
    errorMessages,
    grade: grade(summary.latencyMs.p99, summary.successRate),
    histogram: histogram(primary),
    phases: Object.fromEntries(Object.entries(phases).map(([k, v]) => [k, summarizeLatencies(v)])),
    config: { ...cfg },
    startedAt,
  };
}
