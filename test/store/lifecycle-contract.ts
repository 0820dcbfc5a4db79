// The lifecycle facet of the StateStore contract (src/store/lifecycle.ts): tombstones, E2B
// lifecycle events, webhooks and their delivery queue. Run by storeContract (contract.ts) on
// every backend.
import { expect, it } from 'vitest';
import type { Tombstone } from '../../src/model/death.js';
import type { Delivery, LifecycleEvent } from '../../src/model/lifecycle.js';
import type { StateStore } from '../../src/store/types.js';

const tomb = (over: Partial<Tombstone> = {}): Tombstone => ({
  sandboxID: 'sbx1',
  reason: 'timeout',
  at: 1_000,
  nodeID: 'node-a',
  cubeCode: 130411,
  message: 'timeout reached',
  templateID: 'base',
  metadata: { run: '1' },
  ...over,
});

const event = (n: number, over: Partial<LifecycleEvent> = {}): LifecycleEvent => ({
  id: `00000000-0000-4000-8000-${String(n).padStart(12, '0')}`,
  type: 'sandbox.lifecycle.created',
  at: 10_000 + n,
  sandboxID: 'sbx1',
  templateID: 'base',
  data: null,
  ...over,
});

const delivery = (n: number, over: Partial<Delivery> = {}): Delivery => ({
  id: `d-${n}`,
  webhookID: 'w1',
  eventID: event(n).id,
  body: `{"n":${n}}`,
  attempts: 0,
  dueAt: 1_000,
  ...over,
});

export function lifecycleContract(store: () => StateStore): void {
  it('tombstones: the first reason stays, a typed one replaces vanished, pruned by age', async () => {
    const l = store().lifecycle;
    expect(await l.getTombstone('sbx1')).toBeUndefined();
    expect(await l.putTombstone(tomb())).toBe(true);
    expect(await l.putTombstone(tomb({ reason: 'operator_killed', at: 2_000 }))).toBe(false);
    expect(await l.putTombstone(tomb({ reason: 'vanished', at: 2_000 }))).toBe(false);
    expect(await l.getTombstone('sbx1')).toEqual(tomb());
    expect(await l.putTombstone(tomb({ sandboxID: 'sbx2', reason: 'vanished' }))).toBe(true);
    expect(await l.putTombstone(tomb({ sandboxID: 'sbx2', reason: 'not_readopted', at: 3_000 }))).toBe(true);
    expect(await l.getTombstone('sbx2')).toMatchObject({ reason: 'not_readopted', at: 3_000 });
    await l.pruneLifecycle(2_500, 0);
    expect(await l.getTombstone('sbx1')).toBeUndefined();
    expect((await l.getTombstone('sbx2'))?.reason).toBe('not_readopted');
  });

  it('lifecycle events: appended once per id, filtered by sandbox, owner and types, paged both ways', async () => {
    const l = store().lifecycle;
    const evs = [
      event(1, { owner: 'k1' }),
      event(2, { type: 'sandbox.lifecycle.paused', owner: 'k1' }),
      event(3, { type: 'sandbox.lifecycle.killed', data: { kill_reason: 'timeout' }, owner: 'k1' }),
      event(4, { sandboxID: 'sbx2', owner: 'k2' }),
    ];
    await l.appendLifecycleEvents(evs);
    await l.appendLifecycleEvents(evs.slice(0, 2));
    const page = (q: Partial<Parameters<typeof l.listLifecycleEvents>[0]>) => l.listLifecycleEvents({ offset: 0, limit: 10, orderAsc: false, ...q });
    expect((await page({})).map((e) => e.at)).toEqual([10_004, 10_003, 10_002, 10_001]);
    expect((await page({ sandboxID: 'sbx1', orderAsc: true })).map((e) => e.type)).toEqual([
      'sandbox.lifecycle.created',
      'sandbox.lifecycle.paused',
      'sandbox.lifecycle.killed',
    ]);
    expect((await page({ sandboxID: 'sbx1', offset: 1, limit: 1 }))[0]?.type).toBe('sandbox.lifecycle.paused');
    expect((await page({ types: ['sandbox.lifecycle.killed', 'sandbox.lifecycle.paused'] })).map((e) => e.at)).toEqual([10_003, 10_002]);
    expect((await page({ owner: 'k2' })).map((e) => e.sandboxID)).toEqual(['sbx2']);
    expect(await page({ sandboxID: 'sbx1', types: ['sandbox.lifecycle.killed'] })).toEqual([evs[2]]);
    expect((await l.lastLifecycleEvent('sbx1', ['sandbox.lifecycle.created']))?.id).toBe(evs[0]!.id);
    await l.pruneLifecycle(0, 10_003);
    expect((await page({})).map((e) => e.at)).toEqual([10_004, 10_003]);
  });

  it('webhooks: put, get, list, delete (with their queued deliveries)', async () => {
    const l = store().lifecycle;
    const w = { id: 'w1', name: 'hook', url: 'http://127.0.0.1:1/x', enabled: true, events: ['sandbox.lifecycle.killed' as const], secret: 's', createdAt: 5 };
    await l.putWebhook(w);
    await l.putWebhook({ ...w, id: 'w2', owner: 'k1', createdAt: 6 });
    await l.putWebhook({ ...w, enabled: false });
    expect(await l.getWebhook('w1')).toEqual({ ...w, enabled: false });
    expect((await l.listWebhooks()).map((x) => x.id)).toEqual(['w1', 'w2']);
    await l.enqueueDeliveries([delivery(1)], 100);
    expect(await l.deleteWebhook('w1')).toBe(true);
    expect(await l.deleteWebhook('w1')).toBe(false);
    expect(await l.queuedDeliveries()).toBe(0);
    expect(await l.getWebhook('w1')).toBeUndefined();
  });

  it('deliveries: one per webhook and event, bounded, claimed by one taker until the claim lapses, retried later', async () => {
    const l = store().lifecycle;
    expect(await l.enqueueDeliveries([delivery(1), delivery(2), delivery(3)], 2)).toBe(2);
    expect(await l.enqueueDeliveries([delivery(1, { id: 'other' })], 10)).toBe(0);
    expect(await l.queuedDeliveries()).toBe(2);
    const [a, b] = await Promise.all([l.claimDeliveries(5_000, 10, 1_000), l.claimDeliveries(5_000, 10, 1_000)]);
    expect([...a!, ...b!].map((d) => d.id).sort()).toEqual(['d-1', 'd-2']);
    expect(await l.claimDeliveries(5_500, 10, 1_000)).toEqual([]);
    await l.retryDelivery({ ...delivery(1), attempts: 1, dueAt: 9_000, lastError: 'HTTP 500' });
    await l.finishDelivery('d-2');
    expect(await l.claimDeliveries(8_000, 10, 1_000)).toEqual([]);
    expect(await l.claimDeliveries(9_000, 10, 1_000)).toEqual([{ ...delivery(1), attempts: 1, dueAt: 9_000, lastError: 'HTTP 500' }]);
    // Not finished: taken again once its claim lapsed (its taker died).
    expect((await l.claimDeliveries(10_001, 10, 1_000)).map((d) => d.id)).toEqual(['d-1']);
    expect(await l.queuedDeliveries()).toBe(1);
  });

  it('cursors: absent until set, then the last value', async () => {
    const l = store().lifecycle;
    expect(await l.getCursor('lifecycle')).toBeUndefined();
    await l.setCursor('lifecycle', 42);
    await l.setCursor('lifecycle', 43);
    expect(await l.getCursor('lifecycle')).toBe(43);
  });

  it('ended sandboxes: what a sandbox its client deleted was, pruned with the lifecycle events', async () => {
    const l = store().lifecycle;
    const ended = { sandboxID: 'sbx9', at: 5_000, templateID: 'base', metadata: { run: '9' }, owner: 'k1' };
    expect(await l.getEndedSandbox('sbx9')).toBeUndefined();
    await l.putEndedSandbox(ended);
    expect(await l.getEndedSandbox('sbx9')).toEqual(ended);
    await l.pruneLifecycle(0, 5_001);
    expect(await l.getEndedSandbox('sbx9')).toBeUndefined();
  });
}
