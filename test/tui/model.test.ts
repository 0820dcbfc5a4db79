import { describe, expect, it } from 'vitest';
import { applyMessage, appendEvents, emptyData, EVENT_BUFFER, launchDefaultsOf, releaseRatioOf, withOlderEvents } from '../../src/tui/model.js';
import { applyBatch, createConsoleStore } from '../../src/tui/store.js';
import type { EventView } from '../../src/api/types.js';
import { loadStream } from './replay.js';

const stream = loadStream('watch-handwritten.ndjson');

describe('applyMessage replaying the recorded stream', () => {
  const states = stream.reduce((acc, m) => [...acc, applyMessage(acc[acc.length - 1]!, m)], [emptyData()]).slice(1);
  const last = states[states.length - 1]!;

  it('ends with the live set the deltas describe', () => {
    expect(last.nodeOrder).toEqual(['node-a', 'node-b']);
    expect(last.sandboxOrder).toEqual(['sb-0001', 'sb-0003', 'sb-0004']);
    expect(last.sandboxes['sb-0004']!.state).toBe('running');
    expect(last.events.map((e) => e.id)).toEqual([1, 2, 3, 4, 5, 6, 7]);
    expect(last.config!.version).toBe(2);
    expect(last.lastChanges).toEqual([{ path: 'host.quota.paused_resource_release_ratio', from: 0, to: 0.75, needsRestart: false }]);
    expect(releaseRatioOf(last.config)).toBe(0.75);
    expect(last.stats!.createsLastMinute).toBe(15);
    expect(last.nodes['node-b']!.reason).toBe('cordoned');
    expect(last.applied).toBe(stream.length);
  });

  it('keeps the identity of rows a message did not touch', () => {
    const i = stream.findIndex((m) => m.type === 'node' && m.node.nodeID === 'node-a');
    expect(states[i]!.nodes['node-b']).toBe(states[i - 1]!.nodes['node-b']);
    expect(states[i]!.sandboxes).toBe(states[i - 1]!.sandboxes);
    expect(states[i]!.nodeOrder).toBe(states[i - 1]!.nodeOrder);
  });

  it('drops a sandbox that reached gone, and a removal of an unknown one is a no-op', () => {
    const gone = applyMessage(last, { type: 'sandbox', sandbox: { ...last.sandboxes['sb-0001']!, state: 'gone' } });
    expect(gone.sandboxOrder).toEqual(['sb-0003', 'sb-0004']);
    const same = applyMessage(gone, { type: 'sandbox.removed', sandboxID: 'nope' });
    expect(same.sandboxes).toBe(gone.sandboxes);
  });

  it('a second snapshot replaces everything but the events seen before it (reconnect)', () => {
    const snap = stream[0]!;
    const again = applyMessage(last, snap);
    expect(again.sandboxOrder).toEqual(['sb-0001', 'sb-0002', 'sb-0003']);
    expect(again.config!.version).toBe(1);
    expect(again.events.map((e) => e.id)).toEqual([1, 2, 3, 4, 5, 6, 7]);
  });

  it('a config message without changes (a rejected file) keeps the last reload highlights', () => {
    const again = applyMessage(last, { type: 'config', config: last.config!, changes: [] });
    expect(again.lastChanges).toBe(last.lastChanges);
  });

  it('a batch through the store is one update with the same result', () => {
    const store = createConsoleStore({ apiUrl: 'http://x' });
    let updates = 0;
    store.subscribe(() => updates++);
    applyBatch(store, stream);
    expect(updates).toBe(1);
    expect(store.getState().data).toEqual(last);
  });
});

describe('events buffer', () => {
  const ev = (id: number): EventView => ({ id, at: '2026-11-30T05:00:00.000Z', kind: 'sandbox.created', message: `e${id}` });
  it('dedupes by id and keeps the newest EVENT_BUFFER', () => {
    const many = Array.from({ length: EVENT_BUFFER + 10 }, (_, i) => ev(i + 1));
    const out = appendEvents([ev(1)], many);
    expect(out).toHaveLength(EVENT_BUFFER);
    expect(out[0]!.id).toBe(11);
    expect(out[out.length - 1]!.id).toBe(EVENT_BUFFER + 10);
  });

  it('puts events fetched for the gap of a reconnect in id order', () => {
    expect(appendEvents([ev(1), ev(2), ev(9), ev(10)], [ev(3), ev(8), ev(9)]).map((e) => e.id)).toEqual([1, 2, 3, 8, 9, 10]);
  });
});

describe('config readers', () => {
  it('launch defaults come from the config, with schema defaults before it arrives', () => {
    expect(launchDefaultsOf(null)).toEqual({ templateID: 'base', cpus: 1, memoryMiB: 4096, timeoutSec: 300 });
    const cfg = (stream[0] as Extract<(typeof stream)[0], { type: 'snapshot' }>).snapshot.config;
    expect(launchDefaultsOf(cfg)).toEqual({ templateID: 'host', cpus: 1, memoryMiB: 4096, timeoutSec: 300 });
    expect(releaseRatioOf(null)).toBeNull();
  });
});

describe('paging back into the event history', () => {
  const ev = (id: number): EventView => ({ id, at: '2026-12-01T10:00:00.000Z', kind: 'sandbox.created', message: `e${id}` });
  it('keeps an older page in front, and new events do not push it out', () => {
    let d = { ...emptyData(), events: Array.from({ length: EVENT_BUFFER }, (_, i) => ev(1000 + i)) };
    d = withOlderEvents(d, [ev(998), ev(999), ev(1000)]);
    expect(d.events.slice(0, 3).map((e) => e.id)).toEqual([998, 999, 1000]);
    expect(d.eventCap).toBe(EVENT_BUFFER + 2);
    d = applyMessage(d, { type: 'event', event: ev(5000) });
    expect(d.events.length).toBe(EVENT_BUFFER + 3);
    expect(d.events[0]!.id).toBe(998);
    expect(d.events.at(-1)!.id).toBe(5000);
    expect(withOlderEvents(d, [])).toBe(d);
  });
});
