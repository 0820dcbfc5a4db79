// Times are epoch ms in the model and ISO 8601 on the admin wire; what a version before numeric
// times sends or wrote (ISO 8601) is read as epoch ms at the edge.
import { describe, expect, it } from 'vitest';
import { eventWire, nodeWire } from '../../src/api/admin/wire.js';
import { heartbeatWithEpochTimes, type Heartbeat } from '../../src/cubelet/rpc-wire.js';
import { nodeWithEpochTimes } from '../../src/model/node.js';
import { node } from '../scheduler/fixtures.js';

const T = Date.parse('2026-01-01T00:00:05.000Z');
const ISO = '2026-01-01T00:00:05.000Z';

describe('node times', () => {
  it('the admin wire writes lastSeen and evictAt as ISO 8601; read back they are the same numbers', () => {
    const n = node('a', { lastSeen: T, evictAt: T + 60_000 });
    const wire = nodeWire(n);
    expect(wire).toMatchObject({ lastSeen: ISO, evictAt: '2026-01-01T00:01:05.000Z' });
    expect(nodeWithEpochTimes(wire)).toEqual(n);
    expect(nodeWire(node('b', { lastSeen: T }))).not.toHaveProperty('evictAt');
  });

  it('an event on the admin wire has its time as ISO 8601', () => {
    expect(eventWire({ id: 1, at: T, kind: 'node.joined', message: 'm' })).toEqual({ id: 1, at: ISO, kind: 'node.joined', message: 'm' });
  });

  it('a view with numbers is taken as it is (no copy on the heartbeat path)', () => {
    const n = node('a', { lastSeen: T });
    expect(nodeWithEpochTimes(n)).toBe(n);
  });
});

describe('a heartbeat from a node of the version before numeric times', () => {
  const sandbox = { sandboxID: 's1', startedAt: '2026-01-01T00:00:00.000Z', endAt: '2026-01-01T00:05:00.000Z' };

  it("with a view: its lastSeen and its sandboxes' times are read as epoch ms", () => {
    const hb = { nodeID: 'a', address: 'http://a', events: [], view: { ...node('a'), lastSeen: ISO }, sandboxes: [sandbox] } as unknown as Heartbeat;
    const got = heartbeatWithEpochTimes(hb);
    expect(got.view?.lastSeen).toBe(T);
    expect(got.sandboxes).toEqual([{ sandboxID: 's1', startedAt: Date.parse(sandbox.startedAt), endAt: Date.parse(sandbox.endAt) }]);
  });

  it("without a view: seen.lastSeen and its notices' times are read as epoch ms", () => {
    const hb = {
      nodeID: 'a',
      address: 'http://a',
      events: [{ at: ISO, kind: 'sandbox.oom', message: 'm', seq: 1 }],
      seen: { lastSeen: ISO, configVersion: 3 },
    } as unknown as Heartbeat;
    const got = heartbeatWithEpochTimes(hb);
    expect(got.seen).toEqual({ lastSeen: T, configVersion: 3 });
    expect(got.events).toEqual([{ at: T, kind: 'sandbox.oom', message: 'm', seq: 1 }]);
  });

  it('a heartbeat of this version is the same object', () => {
    const hb: Heartbeat = { nodeID: 'a', address: 'http://a', events: [], view: node('a', { lastSeen: T }) };
    expect(heartbeatWithEpochTimes(hb)).toBe(hb);
  });
});
