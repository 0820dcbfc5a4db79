// What the API limits, and why only that. A sandbox create costs a network slot, cgroups, an
// overlay and a process tree; a read costs a map lookup. A per-key cap on every request capped
// a 20-concurrent create+delete benchmark at ~50 cycles/s (100 requests/s, two per cycle), so
// the API limits what is scarce instead: creates in flight per key (ConcurrencyLimiter), running
// sandboxes per key (sandboxLimitRefusal), and failures per source address (RateLimiter over failed authentications), which keeps floods of
// bad keys, tokens and signatures from costing a sandbox lookup each. Rates and limits are read
// on every call so a config reload applies at once.
import { CubeError } from '../errors.js';
import type { ApiContext } from './context.js';

/** Token buckets by key: `rate` per second with a burst of one second's worth (0 = unlimited). */
export class RateLimiter {
  private readonly buckets = new Map<string, { tokens: number; at: number }>();

  constructor(
    private readonly rate: () => number,
    /** Buckets kept at most; beyond it the full ones are dropped (a full bucket is the default). */
    private readonly maxKeys = 10_000,
  ) {}

  /** Takes one token: 0 when admitted, else whole seconds to wait (for Retry-After). */
  take(key: string, now = Date.now()): number {
    const b = this.refill(key, now);
    if (b === undefined) return 0;
    if (b.tokens >= 1) {
      b.tokens -= 1;
      return 0;
    }
    return this.waitOf(b.tokens);
  }

  /** Like take without taking: whole seconds until one token is there, 0 when one is. */
  wait(key: string, now = Date.now()): number {
    const b = this.refill(key, now);
    return b === undefined || b.tokens >= 1 ? 0 : this.waitOf(b.tokens);
  }

  private waitOf(tokens: number): number {
    return Math.max(1, Math.ceil((1 - tokens) / this.rate()));
  }

  private refill(key: string, now: number): { tokens: number; at: number } | undefined {
    const rate = this.rate();
    if (!(rate > 0)) return undefined;
    let b = this.buckets.get(key);
    if (b === undefined) {
      if (this.buckets.size >= this.maxKeys) this.prune(now, rate);
      b = { tokens: rate, at: now };
      this.buckets.set(key, b);
    }
    b.tokens = Math.min(rate, b.tokens + ((now - b.at) / 1000) * rate);
    b.at = now;
    return b;
  }

  private prune(now: number, rate: number): void {
    for (const [k, b] of this.buckets) if (b.tokens + ((now - b.at) / 1000) * rate >= rate) this.buckets.delete(k);
    // All of them still draining (a flood from many addresses): forget the oldest half.
    if (this.buckets.size >= this.maxKeys) [...this.buckets.keys()].slice(0, this.maxKeys / 2).forEach((k) => this.buckets.delete(k));
  }
}

/** Operations in flight by key, at most `limit()` at once each. */
export class ConcurrencyLimiter {
  private readonly running = new Map<string, number>();

  constructor(private readonly limit: () => number) {}

  /** A release function when admitted (call it exactly once when the operation ends), else undefined. */
  acquire(key: string): (() => void) | undefined {
    const n = this.running.get(key) ?? 0;
    if (n >= this.limit()) return undefined;
    this.running.set(key, n + 1);
    let done = false;
    return () => {
      if (done) return;
      done = true;
      const left = (this.running.get(key) ?? 1) - 1;
      if (left > 0) this.running.set(key, left);
      else this.running.delete(key);
    };
  }

  inFlight(key: string): number {
    return this.running.get(key) ?? 0;
  }
}

/** Requests that take a sandbox's resources: creates, and resumes (connect resumes a paused sandbox). */
/** A new sandbox (not a resume): what api.max_sandboxes_per_key limits. */
export function isCreate(method: string | undefined, path: string): boolean {
  return method === 'POST' && /^\/(?:v2\/)?sandboxes$|^\/admin\/v1\/sandboxes$/.test(path);
}

/**
 * The refusal of a create when the key's running sandboxes plus its creates in flight (this one
 * included) would pass the limit; undefined when it fits. Pure.
 */
export function sandboxLimitRefusal(running: number, inFlight: number, max: number): CubeError | undefined {
  if (running + inFlight <= max) return undefined;
  return new CubeError('SANDBOX_LIMITED', `this API key has ${running} running sandboxes and ${inFlight} creates in flight: at most ${max} (api.max_sandboxes_per_key); kill one or wait`, { retryAfter: 1 });
}

export function isCreateLike(method: string | undefined, path: string): boolean {
  if (method !== 'POST') return false;
  return /^\/(?:v2\/)?sandboxes$|^\/(?:v2\/)?sandboxes\/[^/]+\/(?:resume|connect)$|^\/admin\/v1\/sandboxes(?:\/[^/]+\/resume)?$/.test(path);
}

/** How many sandboxes the key has running (or resuming): what api.max_sandboxes_per_key counts. */
export async function runningOf(ctx: ApiContext, keyID: string): Promise<number> {
  return (await ctx.cp.listSandboxes({ state: ['running', 'resuming'] })).filter((s) => s.owner === keyID).length;
}

/**
 * api.max_sandboxes_per_key without listing every sandbox per create. Counting a key's running
 * sandboxes lists them all (the cluster store reads every route from Redis): per create that grew
 * with the cluster (a tenth of the control's CPU with 650 sandboxes in the 1000-node bench). A
 * count taken here stays good as an upper bound while every sandbox-taking request this server
 * admitted since is added (`note`): a create is admitted on the bound while it is within the limit,
 * and counted exactly otherwise (so a refusal, and anything near the limit, is exact as before).
 * Other replicas' creates reach the bound when it is taken again, after MAX_AGE_MS at most.
 */
export class RunningBound {
  private static readonly MAX_AGE_MS = 2000;
  private readonly counts = new Map<string, { at: number; running: number; since: number }>();

  /** A request that may add a running sandbox for `keyID` (a create, a resume) was admitted. */
  note(keyID: string): void {
    const c = this.counts.get(keyID);
    if (c) c.since++;
  }

  /** The 429 for a create of `keyID` with `inFlight` creates in flight (this one included), or undefined. */
  async refusal(ctx: ApiContext, keyID: string, inFlight: number, max: number): Promise<CubeError | undefined> {
    const c = this.counts.get(keyID);
    if (c && Date.now() - c.at < RunningBound.MAX_AGE_MS && c.running + c.since + inFlight <= max) return undefined;
    const at = Date.now();
    const running = await runningOf(ctx, keyID);
    // The others in flight now are not running yet: they count as admitted since.
    this.counts.set(keyID, { at, running, since: inFlight - 1 });
    return sandboxLimitRefusal(running, inFlight, max);
  }
}

/** A fork makes `count` sandboxes in one request: refused whole (429) unless all of them fit under api.max_sandboxes_per_key. */
export async function assertForkFits(ctx: ApiContext, keyID: string | undefined, count: number): Promise<void> {
  if (keyID === undefined) return;
  const refusal = sandboxLimitRefusal(await runningOf(ctx, keyID), count, ctx.config().api.max_sandboxes_per_key);
  if (refusal) throw refusal;
}
