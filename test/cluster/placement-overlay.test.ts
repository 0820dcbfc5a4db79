// Pure parts of cluster placement and port proxying: this replica's recent placements laid over
// node views until a heartbeat shows them, and the node port-proxy path.
import { describe, expect, it } from 'vitest';
import { parseProxyPath, proxyPath } from '../../src/cubelet/rpc-wire.js';
import { MasterConfigSchema } from '../../src/config/schema.js';
import { PlacementBook, withPlacements } from '../../src/scheduler/cluster/node-views.js';
import { densityParamsFromConfig, footprintMiB } from '../../src/model/density.js';
import { NOW, node } from '../scheduler/fixtures.js';

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

describe('withPlacements', () => {
  const p = (at: number, nodeID = 'a') => ({ nodeID, cpus: 2, memoryMiB: 1024, at: NOW + at });
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
  it.each(['/node/v1/createSandbox', '/node/v1/proxy/abc', '/node/v1/proxy/abc/0/x', '/node/v1/proxy/abc/70000/', '/other'])('%s is not a proxy target', (t) => {
    expect(parseProxyPath(t)).toBeUndefined();
  });
});
