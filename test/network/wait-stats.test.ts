import { describe, expect, it } from 'vitest';
import { RECENT_MS, RecentCount, WaitWindow } from '../../src/network/wait-stats.js';

describe('pool wait window', () => {
  it('percentiles cover the last RECENT_MS only: a stall that is over stops showing', () => {
    const w = new WaitWindow();
    for (let i = 0; i < 50; i++) w.record(400, 0);
    w.record(2, RECENT_MS + 1000);
    expect(w.summary(RECENT_MS).waitP99Ms).toBe(400);
    expect(w.summary(RECENT_MS + 2000)).toMatchObject({ waitP99Ms: 2, waitP50Ms: 2 });
    // The sparkline keeps the last values whatever their age.
    expect(w.summary(RECENT_MS + 2000).recentWaitsMs.slice(-2)).toEqual([400, 2]);
  });

  it('counts on-demand allocations of the window', () => {
    const c = new RecentCount();
    c.record(0);
    c.record(1000);
    expect(c.count(RECENT_MS)).toBe(2);
    expect(c.count(RECENT_MS + 500)).toBe(1);
    expect(c.count(RECENT_MS + 5000)).toBe(0);
  });
});
