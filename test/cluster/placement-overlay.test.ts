// Pure parts of cluster placement and port proxying: this replica's recent placements laid over
// node views until a heartbeat shows them, and the node port-proxy path.
import { afterEach, describe, expect, it, vi } from 'vitest';
import { parseProxyPath, proxyPath } from '../../src/cubelet/rpc-wire.js';
import { MasterConfigSchema } from '../../src/config/schema.js';
import { PlacementBook, withPlacements } from '../../src/control/cluster/node-views.js';
import { InProcessFeed } from '../../src/control/node-feed.js';
import { densityParamsFromConfig, footprintMiB } from '../../src/model/density.js';
import { stamp } from '../../src/model/time.js';
import { schedule } from '../../src/scheduler/pipeline.js';
import { NOW, REQ, config, node } from '../scheduler/fixtures.js';

const params = densityParamsFromConfig(MasterConfigSchema.parse({}));
const seen = (ms: number) => node('a', { lastSeen: NOW + ms });

describe('PlacementBook: which placements a new metrics read still needs added', () => {
  const p = (at: number, nodeID = 'a') => ({ nodeID, cpus: 1, memoryMiB: 512, at: NOW + at });
  it.each([
    ['a heartbeat stamped after the node started counting it: done', p(-1), 0, false],
    ['stamped in the same millisecond: kept (it may predate the sandbox)', p(0), 0, true],
    ['stamped before: kept', p(1), 0, true],
    ['still in flight: kept', { ...p(0), at: Infinity }, 0, true],
    ['older than any heartbeat could be (the node went silent): done', p(-61_000), -100_000, false],
  ])('%s', (_name, placement, heartbeat, kept) => {
    const book = new PlacementBook(() => params);
    book.setViews([seen(-100_000)], NOW);
    book.place(placement);
    book.setViews([seen(heartbeat)], NOW);
    expect(book.nodeViews()[0]!.sandboxes.total).toBe(kept ? 1 : 0);
  });

  it('a placement on a node no longer in the views is done, and stays done when the node is back', () => {
    const book = new PlacementBook(() => params);
    book.setViews([seen(0)], NOW);
    book.place(p(1));
    book.setViews([node('b', { lastSeen: NOW })], NOW);
    book.setViews([seen(0)], NOW);
    expect(book.nodeViews()[0]!.sandboxes.total).toBe(0);
  });

  it('a forgotten placement (the create failed) no longer counts; creates in flight go on the candidates only', () => {
    const book = new PlacementBook(() => params);
    book.setViews([seen(0), node('b', { lastSeen: NOW })], NOW);
    const q = { ...p(0), at: Infinity };
    book.place(q);
    expect(book.nodeViews()[0]!.sandboxes.total).toBe(1);
    book.forget(q);
    expect(book.nodeViews()[0]!.sandboxes.total).toBe(0);
    const cands = book.withInFlight(new Map([['b', 3]]));
    expect(cands.map((c) => c.inFlightCreates)).toEqual([0, 3]);
    expect(book.withInFlight(new Map()).map((c) => c.inFlightCreates)).toEqual([0, 0]);
  });
});

describe('PlacementBook: sandboxes this replica destroyed', () => {
  const used = (cpus: number, total: number) => node('a', { lastSeen: NOW, usage: { quotaCpuUsed: cpus }, sandboxes: { total } });
  const gone = (at: number) => ({ nodeID: 'a', cpus: 1, memoryMiB: 512, at: NOW + at, removed: true as const });
  it.each([
    ['destroyed after the view was read: taken off', gone(1), 24, 24],
    ['in the same millisecond: taken off (the view still held it)', gone(0), 24, 24],
    ['destroyed before the view was read: the view already lacks it', gone(-1), 25, 25],
  ])('%s', (_name, removal, cpus, total) => {
    const book = new PlacementBook(() => params);
    book.setViews([used(25, 25)], NOW);
    book.release(removal);
    const v = book.nodeViews()[0]!;
    expect([v.usage.quotaCpuUsed, v.sandboxes.total]).toEqual([cpus, total]);
  });

  it('a create-delete loop on a full node: a delete makes room for the next create before the next read', () => {
    // 25 sandboxes of 1 cpu on a 25.6-cpu node (2 cpus x 16 oversell x 80%), views read at NOW.
    const book = new PlacementBook(() => params);
    book.setViews([used(25, 25)], NOW);
    book.release(gone(1));
    book.place({ nodeID: 'a', cpus: 1, memoryMiB: 512, at: NOW + 2 });
    expect(book.nodeViews()[0]!.usage.quotaCpuUsed).toBe(25);
    // The next read (its view lacks the destroyed one and holds the new one): both entries done.
    book.setViews([node('a', { lastSeen: NOW + 3, usage: { quotaCpuUsed: 25 }, sandboxes: { total: 25 } })], NOW + 3);
    expect(book.nodeViews()[0]!.usage.quotaCpuUsed).toBe(25);
  });

  it('never below zero', () => {
    const book = new PlacementBook(() => params);
    book.setViews([used(0, 0)], NOW);
    book.release(gone(1));
    const v = book.nodeViews()[0]!;
    expect([v.usage.quotaCpuUsed, v.usage.quotaMemUsedMiB, v.sandboxes.total]).toEqual([0, 0, 0]);
  });
});

describe("a burst in one millisecond, stamped with the process's strict clock (model/time.ts)", () => {
  afterEach(() => vi.restoreAllMocks());

  it('stamps are strictly increasing integers, never behind the wall clock', () => {
    const wall = Date.now();
    const frozen = vi.spyOn(Date, 'now').mockReturnValue(wall); // several stamps in one millisecond
    const a = stamp();
    const b = stamp();
    expect(Number.isInteger(a) && a >= wall && b === a + 1).toBe(true);
    frozen.mockRestore();
    const now = Date.now();
    const c = stamp();
    expect(c > b && c >= now).toBe(true);
  });

  it("an in-process node's creates and destroys are stamped on the same clock as its views", () => {
    vi.spyOn(Date, 'now').mockReturnValue(NOW);
    const feed = new InProcessFeed([]);
    const view = stamp();
    const sent = feed.sentAt();
    const destroyed = feed.destroySentAt();
    expect(view < sent && sent < destroyed && destroyed < stamp()).toBe(true);
  });

  it('15 creates sent in the millisecond of a view that counts them are not counted twice; those sent after it are added', () => {
    vi.spyOn(Date, 'now').mockReturnValue(NOW); // everything below happens within one millisecond
    const book = new PlacementBook(() => params);
    book.setViews([node('a', { lastSeen: stamp() })], NOW);
    const burst = Array.from({ length: 15 }, () => ({ nodeID: 'a', cpus: 1, memoryMiB: 512, at: Infinity }));
    for (const p of burst) book.place(p); // decided
    for (const p of burst) p.at = stamp(); // sent: the node counts each from here (InProcessFeed.sentAt)
    const view = node('a', { lastSeen: stamp(), usage: { quotaCpuUsed: 15 }, sandboxes: { creating: 15, total: 15 } });
    book.setViews([view], NOW);
    expect(book.nodeViews()[0]!.usage.quotaCpuUsed).toBe(15);
    const after = Array.from({ length: 3 }, () => ({ nodeID: 'a', cpus: 1, memoryMiB: 512, at: stamp() }));
    for (const p of after) book.place(p);
    book.release({ nodeID: 'a', cpus: 1, memoryMiB: 512, at: stamp(), removed: true }); // one of the 15, destroyed after the view
    expect(book.nodeViews()[0]!.usage.quotaCpuUsed).toBe(17);
    // With the wall clock's milliseconds instead, the tie counted the burst on top of the view.
    const wallClock = { ...view, lastSeen: NOW };
    const sentAtNow = burst.map((p) => ({ ...p, at: NOW }));
    expect(withPlacements(wallClock, sentAtNow, params).usage.quotaCpuUsed).toBe(30);
  });
});

describe('PlacementBook: the prepared nodes decisions read', () => {
  it('each candidate carries the node prepared from its current view: a metrics read and a placement make it again', () => {
    const book = new PlacementBook(() => params);
    // 116 of the reference spec held: one more fits, then the node is full.
    const nearlyFull = () => node('a', { lastSeen: NOW, usage: { quotaMemUsedMiB: 116 * 4202 } });
    book.setViews([nearlyFull()], NOW);
    const before = book.withInFlight(new Map());
    expect(before[0]!.prepared?.view).toBe(before[0]!.view);
    expect(schedule(REQ, before, config(), NOW, () => 0)).toMatchObject({ ok: true, nodeID: 'a' });
    // The node answered at NOW + 500 (its clock): a heartbeat stamped later shows the sandbox.
    book.place({ nodeID: 'a', cpus: REQ.cpus, memoryMiB: REQ.memoryMiB, at: NOW + 500 });
    const after = book.withInFlight(new Map([['a', 1]]));
    expect(after[0]!.prepared?.view).toBe(after[0]!.view);
    expect(after[0]!.prepared?.quotaMemUsedMiB).toBe(117 * 4202);
    expect(schedule(REQ, after, config(), NOW, () => 0)).toMatchObject({
      ok: false,
      rejections: [{ nodeID: 'a', filter: 'mem', reason: 'mem 117/117 (491634+4202 > 493568 MiB)' }],
    });
    // A newer read whose heartbeat shows the sandbox ended meanwhile (the placement is done): room again.
    book.setViews([node('a', { lastSeen: NOW + 1000, usage: { quotaMemUsedMiB: 116 * 4202 } })], NOW + 1000);
    const read = book.withInFlight(new Map());
    expect(read[0]!.prepared?.view).toBe(read[0]!.view);
    expect(schedule(REQ, read, config(), NOW + 1000, () => 0)).toMatchObject({ ok: true, nodeID: 'a' });
  });
});

describe('PlacementBook: a view a read brings again', () => {
  it('keeps its prepared node; a new view of the node gets a new one', () => {
    const book = new PlacementBook(() => params);
    const a = node('a', { lastSeen: NOW });
    const b = node('b', { lastSeen: NOW });
    book.setViews([a, b], NOW);
    const [pa, pb] = book.withInFlight(new Map()).map((c) => c.prepared);
    const b2 = node('b', { lastSeen: NOW + 1000, sandboxes: { total: 5 } });
    book.setViews([b2, a], NOW + 1000);
    const [cb, ca] = book.withInFlight(new Map());
    expect(ca!.prepared).toBe(pa);
    expect(cb!.prepared).not.toBe(pb);
    expect(cb!.prepared).toMatchObject({ view: b2, sandboxes: 5 });
  });
});

describe('withPlacements', () => {
  const p = (at: number, nodeID = 'a') => ({ nodeID, cpus: 2, memoryMiB: 1024, diskGiB: 10, at: NOW + at });
  it.each([
    ['in flight (at = Infinity) counts', [{ ...p(0), at: Infinity }], 1],
    ['answered after the last heartbeat counts', [p(500)], 1],
    ['answered before the last heartbeat is already in the view', [p(-500)], 0],
    ['several add up', [p(100), p(200), p(-100)], 2],
  ])('%s', (_name, recent, extra) => {
    const base = seen(0);
    const v = withPlacements(base, recent, params);
    expect(v.sandboxes.total - base.sandboxes.total).toBe(extra);
    expect(v.sandboxes.creating - base.sandboxes.creating).toBe(extra);
    expect(v.usage.quotaCpuUsed - base.usage.quotaCpuUsed).toBe(2 * extra);
    expect(v.usage.quotaMemUsedMiB - base.usage.quotaMemUsedMiB).toBeCloseTo(extra * footprintMiB({ cpus: 2, memoryMiB: 1024 }, params));
    // The disk quota a burst takes counts before the node reports it (the disk_quota filter reads it).
    if (extra > 0) expect(v.usage.quotaDiskUsedGiB).toBe(10 * extra);
  });

  it('another node is untouched: the book changes only the placed node', () => {
    const book = new PlacementBook(() => params);
    const b = node('b', { lastSeen: NOW });
    book.setViews([seen(0), b], NOW);
    book.place(p(500));
    expect(book.nodeViews()[1]).toBe(b);
  });
});

describe('port proxy path', () => {
  it.each([
    ['/index.html', '/index.html'],
    ['/a/b?x=1&y=2', '/a/b?x=1&y=2'],
    ['?q=1', '/?q=1'],
    ['/', '/'],
  ])('%s round-trips', (path, want) => {
    expect(parseProxyPath(proxyPath('abc123', 8000, path))).toEqual({ sandboxID: 'abc123', port: 8000, path: want });
  });
  it.each(['/node/v1/createSandbox', '/node/v1/proxy/abc', '/node/v1/proxy/abc/0/x', '/node/v1/proxy/abc/70000/', '/other'])(
    '%s is not a proxy target',
    (t) => {
      expect(parseProxyPath(t)).toBeUndefined();
    },
  );
});
