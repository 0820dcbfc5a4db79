// Per-key token bucket: `rate` requests per second with a burst of one second's worth.
// The rate is read on every call so a config reload applies at once.
export class RateLimiter {
  private readonly buckets = new Map<string, { tokens: number; at: number }>();

  constructor(private readonly rate: () => number) {}

  /** 0 when admitted, else whole seconds to wait (for Retry-After). */
  take(key: string, now = Date.now()): number {
    const rate = this.rate();
    const b = this.buckets.get(key) ?? { tokens: rate, at: now };
    b.tokens = Math.min(rate, b.tokens + ((now - b.at) / 1000) * rate);
    b.at = now;
    this.buckets.set(key, b);
    if (b.tokens >= 1) {
      b.tokens -= 1;
      return 0;
    }
    return Math.max(1, Math.ceil((1 - b.tokens) / rate));
  }
}
