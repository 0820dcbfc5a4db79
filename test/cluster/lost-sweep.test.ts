// Lost-node detection on the real Redis + MariaDB (own prefix and database).
import { describe, expect, it } from 'vitest';
import type { NodeView } from '../../src/model/node.js';
import { MasterConfigSchema } from '../../src/config/schema.js';
import { isLost, sweepLostNodes } from '../../src/control/cluster/lost-sweep.js';
import { ClusterStore } from '../../src/store/cluster/index.js';
import { clusterStateScope } from '../helpers/cluster-state.js';
import { sandboxRecord } from '../store/contract.js';

const NOW = Date.parse('2026-01-01T00:00:10Z');
const ago = (ms: number) => NOW - ms;

describe('isLost', () => {
  it.each([
    ['fresh', ago(900), false],
    ['at the timeout', ago(3000), false],
    ['past three heartbeats', ago(3001), true],
    ['expired metrics', undefined, true],
    ['unreadable (an older ISO 8601 that did not parse)', NaN, true],
  ])('%s', (_name, lastSeen, want) => {
    expect(isLost(lastSeen, NOW, 3000)).toBe(want);
  });
});

describe('sweepLostNodes', () => {
  it('marks a silent node and its sandboxes lost once, leaves live nodes alone, and only the lease holder sweeps', async () => {
    const scope = clusterStateScope();
    const store = new ClusterStore(scope);
    try {
      await store.init();
      const cfg = MasterConfigSchema.parse({});
      for (const id of ['alive', 'silent']) await store.putNode({ nodeID: id, cordoned: false, draining: false, joinedAt: ago(60_000) });
      await store.live.putNodeMetrics([{ nodeID: 'alive', lastSeen: ago(500) } as NodeView], 60_000);
      await store.live.putNodeMetrics([{ nodeID: 'silent', lastSeen: ago(4000) } as NodeView], 60_000);
      await store.putSandbox(sandboxRecord('on-alive', { nodeID: 'alive' }));
      await store.putSandbox(sandboxRecord('on-silent-1', { nodeID: 'silent' }));
      await store.putSandbox(sandboxRecord('on-silent-2', { nodeID: 'silent', state: 'paused' }));

      expect(await sweepLostNodes(store, cfg, NOW, 'replica-b-not-first')).toEqual(['silent']);
      expect(await sweepLostNodes(store, cfg, NOW, 'replica-c')).toEqual([]); // lease held by the first
      expect(await sweepLostNodes(store, cfg, NOW, 'replica-b-not-first')).toEqual([]); // already lost: no second event

      const byID = Object.fromEntries((await store.listSandboxes()).map((s) => [s.sandboxID, s]));
      expect(byID['on-alive']!.state).toBe('running');
      expect(byID['on-silent-1']).toMatchObject({ state: 'lost', reason: 'node silent stopped heartbeating' });
      expect(byID['on-silent-2']!.state).toBe('lost');
      const events = (await store.listEvents()).filter((e) => e.kind === 'node.lost');
      expect(events).toHaveLength(1);
      expect(events[0]!.message).toBe('node silent lost (last heartbeat 4.0s ago); 2 sandbox(es) marked lost');

      // No metrics at all (Redis restarted empty): silent from the first sweep that noticed.
      await store.putNode({ nodeID: 'no-metrics', cordoned: false, draining: false, joinedAt: ago(60_000) });
      const missing = new Map<string, number>();
      await store.live.putNodeMetrics([{ nodeID: 'alive', lastSeen: NOW + 3000 } as NodeView], 60_000);
      expect(await sweepLostNodes(store, cfg, NOW, 'replica-b-not-first', missing)).toEqual([]);
      expect(await sweepLostNodes(store, cfg, NOW + 3000, 'replica-b-not-first', missing)).toEqual([]);
      expect(await sweepLostNodes(store, cfg, NOW + 3001, 'replica-b-not-first', missing)).toEqual(['no-metrics']);
      expect((await store.listEvents()).at(-1)!.message).toBe('node no-metrics lost (no metrics for 3.0s); 0 sandbox(es) marked lost');

      // A store outage seen by this replica pauses detection: silence counts from the last failure.
      const t = NOW + 3001;
      await store.putNode({ nodeID: 'outage', cordoned: false, draining: false, joinedAt: ago(60_000) });
      await store.live.putNodeMetrics([{ nodeID: 'outage', lastSeen: t - 5000 } as NodeView], 60_000);
      expect(await sweepLostNodes(store, cfg, t, 'replica-b-not-first', missing, t - 1000)).toEqual([]);
      expect(await sweepLostNodes(store, cfg, t + 2500, 'replica-b-not-first', missing, t - 1000)).toEqual(['outage']);
    } finally {
      await store.close();
      await scope.drop();
    }
  });
});
