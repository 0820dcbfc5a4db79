// What the API limits on this replica, and why only that. A sandbox create costs a network slot,
// cgroups, an overlay and a process tree; a read costs a map lookup. A per-key cap on every
// request capped a 20-concurrent create+delete benchmark at ~50 cycles/s (100 requests/s, two per
// cycle), so the API limits what is scarce instead: creates in flight per key (ConcurrencyLimiter)
// and failures per source address (RateLimiter over failed authentications), which keeps floods
// of bad keys, tokens and signatures from costing a lookup each. A key's quotas (running
// sandboxes, vCPUs, memory, creates per second) are the store's, the same on every replica
// (control/keys.ts). Rates and limits are read on every call so a config reload applies at once.

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
export function isCreateLike(method: string | undefined, path: string): boolean {
  if (method !== 'POST') return false;
  return /^\/(?:v2\/)?sandboxes$|^\/(?:v2\/)?sandboxes\/[^/]+\/(?:resume|connect)$|^\/admin\/v1\/sandboxes(?:\/[^/]+\/resume)?$/.test(path);
}
