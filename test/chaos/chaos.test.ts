// The chaos benchmark's short version (issue 24; bench/chaos.ts runs 2,000 rollouts): 200 or more RL
// rollouts through the real `e2b` SDK (create with an idempotency key, `echo ok`, kill) at 20
// concurrent against 2 control replicas and 3 compute nodes on their own Redis and MariaDB, while
// one fault of each kind and on each kind of component happens in turn: kill -9 of a replica, a
// node frozen past the create deadline, a Redis restart, a MariaDB kill -9 (rollouts go on until
// all four have happened). Every count must be 0
// (test/helpers/chaos.ts says what each means); the findings name what broke.
import { describe, expect, it } from 'vitest';
import { runChaos } from '../helpers/chaos.js';

describe('chaos: one fault of each kind during at least 200 rollouts', () => {
  it('leaves no rollout without an outcome, no orphan, no unexplained death, no lie and no stale record', async () => {
    const lines: string[] = [];
    const r = await runChaos({
      quiet: 0,
      rollouts: 200,
      concurrency: 20,
      faultEveryMs: 5000,
      // Past the create deadline (10 s): creates placed on the frozen node go elsewhere.
      freezeMs: 12_000,
      faults: [
        { action: 'kill9', target: 'replica' },
        { action: 'freeze', target: 'node' },
        { action: 'restart', target: 'redis' },
        { action: 'kill9', target: 'mariadb' },
      ],
      faultsAtLeast: 4,
      log: (l) => lines.push(l),
    });
    expect({ counts: r.counts, findings: r.findings }).toEqual({ counts: { lost: 0, orphans: 0, unexplained: 0, lies: 0, stale: 0 }, findings: [] });
    // Each of the four happened during the rollouts (they go on until then).
    expect(r.faults.filter((f) => !/ failed: /.test(f)).length, lines.join('\n')).toBeGreaterThanOrEqual(4);
  }, 600_000);
});
