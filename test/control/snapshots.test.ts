// The pure parts of snapshots and fork: what a create from a snapshot asks, what a start sweeps,
// names, and the E2B list's pages.
import { describe, expect, it } from 'vitest';
import { snapshotPage } from '../../src/api/e2b/snapshots.js';
import type { SnapshotRecord } from '../../src/model/sandbox.js';
import { answersTo, checkSnapshotName, createFromSnapshot, strays } from '../../src/control/snapshots.js';

const snap = (id: string, over: Partial<SnapshotRecord> = {}): SnapshotRecord => ({
  snapshotID: id,
  names: [],
  sandboxID: 'origin',
  nodeID: 'node-a',
  templateID: 'deb',
  runtime: 'ns',
  keeps: 'filesystem',
  spec: { cpus: 2, memoryMiB: 512, diskGiB: 3 },
  metadata: { team: 'rl', run: '1' },
  envVars: { A: '1', B: '2' },
  createdAt: Date.parse('2026-01-01T00:00:00.000Z'),
  ...over,
});

describe('createFromSnapshot', () => {
  it.each([
    ['nothing asked: all from the snapshot', {}, { cpus: 2, memoryMiB: 512, diskGiB: 3, metadata: { team: 'rl', run: '1' }, envVars: { A: '1', B: '2' } }],
    [
      'the request wins field by field',
      { cpus: 1, metadata: { run: '2' }, envVars: { B: 'x' }, timeoutSec: 60 },
      { cpus: 1, memoryMiB: 512, timeoutSec: 60, metadata: { team: 'rl', run: '2' }, envVars: { A: '1', B: 'x' } },
    ],
  ])('%s', (_name, req, want) => {
    expect(createFromSnapshot(snap('snap-1'), { templateID: 'snap-1', ...req })).toMatchObject({
      templateID: 'deb',
      fromSnapshot: 'snap-1',
      nodeID: 'node-a',
      runtime: 'ns',
      ...want,
    });
  });

  it.each([
    [{ nodeID: 'node-b' }, /kept on node node-a/],
    [{ runtime: 'microvm' }, /taken by the ns runtime/],
  ])('refuses %j with 400', (req, msg) => {
    expect(() => createFromSnapshot(snap('snap-1'), req)).toThrow(msg);
  });
});

describe('strays', () => {
  it.each([
    [[], [], { data: [], records: [] }],
    [['snap-a', 'snap-b'], ['snap-a'], { data: ['snap-b'], records: [] }],
    [['snap-a'], ['snap-a', 'snap-c'], { data: [], records: ['snap-c'] }],
  ])('kept %j, recorded %j', (kept, recorded, want) => {
    expect(
      strays(
        kept,
        recorded.map((id) => snap(id)),
      ),
    ).toEqual(want);
  });
});

describe('names', () => {
  it.each(['a', 'my-snapshot', 'team/x.v2_1', 'x'.repeat(128)])('%s is a name', (n) => expect(() => checkSnapshotName(n)).not.toThrow());
  it.each(['', '-x', '../x', 'a b', 'x'.repeat(129), 'a:b'])('%j is not', (n) => expect(() => checkSnapshotName(n)).toThrow(/snapshot name/));
  it('answers to its id and its names', () => {
    const s = snap('snap-1', { names: ['one'] });
    expect([answersTo(s, 'snap-1'), answersTo(s, 'one'), answersTo(s, 'two')]).toEqual([true, true, false]);
  });
});

describe('snapshotPage', () => {
  const all = ['s1', 's2', 's3'].map((id) => snap(id));
  it.each([
    [3, undefined, ['s1', 's2', 's3'], undefined],
    [2, undefined, ['s1', 's2'], 's2'],
    [2, 's2', ['s3'], undefined],
    [1, 's1', ['s2'], 's2'],
  ])('limit %d after %s', (limit, token, ids, next) => {
    const p = snapshotPage(all, limit, token);
    expect(p.items.map((s) => s.snapshotID)).toEqual(ids);
    expect(p.nextToken).toBe(next);
  });
  it('refuses a token that is not in the list', () => expect(() => snapshotPage(all, 1, 'gone')).toThrow(/nextToken/));
});
