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

  it('reuses a summary for up to a second while nothing is recorded; a record or a later second computes it again', () => {
    const w = new WaitWindow();
    w.record(400, 0);
    const first = w.summary(RECENT_MS - 500);
    expect(w.summary(RECENT_MS + 400)).toBe(first); // the 400 left the window, but within the second: reused
    expect(w.summary(RECENT_MS + 600)).toMatchObject({ waitP99Ms: 0 }); // computed again: it is gone
    w.record(7, RECENT_MS + 700);
    expect(w.summary(RECENT_MS + 700)).toMatchObject({ waitP50Ms: 7, waitP99Ms: 7 });
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
