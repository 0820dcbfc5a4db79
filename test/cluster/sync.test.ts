// The cluster's pure parts: a node's view as the control plane shows it, and reconciling a
// node's records with the sandboxes its heartbeat lists.
import { describe, expect, it } from 'vitest';
import type { SandboxView } from '../../src/model/sandbox.js';
import type { SandboxRecord } from '../../src/model/sandbox.js';
import { clusterNodeView } from '../../src/control/cluster/node-views.js';
import { syncNodeSandboxes } from '../../src/control/cluster/sandbox-sync.js';
import { NOW, node } from '../scheduler/fixtures.js';

const reg = (over: Partial<{ cordoned: boolean; draining: boolean; address: string }> = {}) => ({
  nodeID: 'a',
  cordoned: false,
  draining: false,
  joinedAt: Date.parse('2025-01-01T00:00:00Z'),
  address: 'http://10.0.0.2:7000',
  ...over,
});

describe('clusterNodeView', () => {
  it.each([
    ['fresh', reg(), node('a'), false, { healthy: true, schedulable: true, lost: false, reason: '' }],
    ['cordoned', reg({ cordoned: true }), node('a'), false, { healthy: true, schedulable: false, cordoned: true, reason: 'cordoned' }],
    [
      'disk over watermark stays healthy',
      reg(),
      node('a', { schedulable: false, reason: 'disk watermark 83% >= 80%' }),
      false,
      { healthy: true, schedulable: false, reason: 'disk watermark 83% >= 80%' },
    ],
    [
      'stale',
      reg(),
      node('a', { lastSeen: NOW - 5000 }),
      false,
      { healthy: false, schedulable: false, lost: false, reason: 'heartbeat stale: last heartbeat 5.0s ago' },
    ],
    ['lost', reg(), node('a', { lastSeen: NOW - 4000 }), true, { healthy: false, schedulable: false, lost: true, reason: 'lost: last heartbeat 4.0s ago' }],
    ['no metrics', reg(), undefined, true, { healthy: false, lost: true, reason: 'lost: no heartbeat on record', templates: [] }],
  ])('%s', (_name, rec, metrics, lost, want) => {
    const v = clusterNodeView(rec, metrics, lost, NOW, 3000);
    expect(v).toMatchObject({ ...want, nodeID: 'a', address: 'http://10.0.0.2:7000' });
  });
});

const view = (id: string, over: Partial<SandboxView> = {}): SandboxView => ({
  sandboxID: id,
  templateID: 'host',
  nodeID: 'a',
  state: 'running',
  spec: { cpus: 1, memoryMiB: 256, diskGiB: 1 },
  metadata: {},
  startedAt: NOW - 60_000,
  endAt: NOW + 60_000,
  runtime: 'ns',
  ...over,
});
const rec = (id: string, over: Partial<SandboxRecord> = {}): SandboxRecord => ({ ...view(id), accessToken: `tok-${id}`, envVars: { K: id }, ...over });

describe('syncNodeSandboxes', () => {
  it.each([
    ['in step: nothing', [rec('s1')], [view('s1')], []],
    [
      'state changed on the node: update, secrets kept',
      [rec('s1')],
      [view('s1', { state: 'paused' })],
      [{ type: 'update', rec: rec('s1', { state: 'paused' }) }],
    ],
    [
      'lost record, node back with it: running again, lost reason dropped',
      [rec('s1', { state: 'lost', reason: 'node a stopped heartbeating' })],
      [view('s1')],
      [{ type: 'update', rec: rec('s1') }],
    ],
    ['on the node only: unknown', [], [view('s2')], [{ type: 'unknown', view: view('s2') }]],
    ['record only: gone', [rec('s3')], [], [{ type: 'gone', rec: rec('s3') }]],
    ['creating within grace: left alone', [rec('s4', { state: 'creating', startedAt: NOW - 1000 })], [], []],
    [
      'creating past grace: gone',
      [rec('s5', { state: 'creating', startedAt: NOW - 200_000 })],
      [],
      [{ type: 'gone', rec: rec('s5', { state: 'creating', startedAt: NOW - 200_000 }) }],
    ],
    ['made, its answer still on its way before the deadline: left alone', [rec('s6', { createBy: NOW + 1000 })], [view('s6')], []],
    [
      'made, its answer never delivered by the deadline: unanswered',
      [rec('s7', { createBy: NOW - 1 })],
      [view('s7')],
      [{ type: 'unanswered', rec: rec('s7', { createBy: NOW - 1 }) }],
    ],
    [
      'creating past its deadline on the node: an update (its creator is asked under the lock), without the mark: undone or adopted, no answer is awaited',
      [rec('s8', { state: 'creating', createBy: NOW - 1 })],
      [view('s8')],
      [{ type: 'update', rec: rec('s8') }],
    ],
    ['a keyed create, settled by its key, is never undone as unanswered', [rec('s9', { createBy: NOW - 1, keyed: true })], [view('s9')], []],
  ])('%s', (_name, records, onNode, want) => {
    expect(syncNodeSandboxes(records, onNode, NOW, 120_000)).toEqual(want);
  });
});

describe('syncNodeSandboxes with the node clock of the list', () => {
  const LISTED = 1_000_000;
  it.each([
    [
      'a list taken before the create answered does not turn running back into creating',
      [rec('s1', { nodeAt: LISTED + 5 })],
      [view('s1', { state: 'creating' })],
      [],
    ],
    ['nor drop a record written after it', [rec('s1', { nodeAt: LISTED })], [], []],
    [
      'a list taken after the answer updates, stamped with its time',
      [rec('s1', { nodeAt: LISTED - 5 })],
      [view('s1', { state: 'paused' })],
      [{ type: 'update', rec: rec('s1', { state: 'paused', nodeAt: LISTED }) }],
    ],
    ['a record without a stamp follows the list', [rec('s1')], [], [{ type: 'gone', rec: rec('s1') }]],
    [
      'an unanswered create is undone however new its record',
      [rec('s1', { nodeAt: LISTED + 5, createBy: NOW - 1 })],
      [view('s1')],
      [{ type: 'unanswered', rec: rec('s1', { nodeAt: LISTED + 5, createBy: NOW - 1 }) }],
    ],
  ])('%s', (_name, records, onNode, want) => {
    expect(syncNodeSandboxes(records, onNode, NOW, 120_000, LISTED)).toEqual(want);
  });
});
