import { describe, expect, it } from 'vitest';
import { CreateStats } from '../../src/control/create-stats.js';

describe('create stats', () => {
  it('counts refusals of the last minute by code and rule, most first', () => {
    const s = new CreateStats();
    s.recordRefusal(130597, 'mem', 0);
    for (let i = 0; i < 3; i++) s.recordRefusal(130597, 'cpu', 50_000);
    s.recordRefusal(130409, 'release_ratio', 55_000);
    expect(s.view(59_000).refusedLastMinute).toEqual([
      { code: 130597, rule: 'cpu', count: 3 },
      { code: 130597, rule: 'mem', count: 1 },
      { code: 130409, rule: 'release_ratio', count: 1 },
    ]);
    expect(s.view(61_000).refusedLastMinute).toEqual([
      { code: 130597, rule: 'cpu', count: 3 },
      { code: 130409, rule: 'release_ratio', count: 1 },
    ]);
    expect(s.view(200_000)).not.toHaveProperty('refusedLastMinute');
  });

  it('keeps counting refusals since start after the minute has passed (a Prometheus counter never goes down)', () => {
    const s = new CreateStats();
    expect(s.view(0)).not.toHaveProperty('refusedSinceStart');
    s.recordRefusal(130597, 'mem', 0);
    s.recordRefusal(130597, 'mem', 1_000);
    s.recordRefusal(130409, 'release_ratio', 2_000);
    expect(s.view(500_000).refusedSinceStart).toEqual([
      { code: 130597, rule: 'mem', count: 2 },
      { code: 130409, rule: 'release_ratio', count: 1 },
    ]);
  });
});
