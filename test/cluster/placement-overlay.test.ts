// Pure parts of cluster placement and port proxying: this replica's recent placements laid over
// node views until a heartbeat shows them, and the node port-proxy path.
import { describe, expect, it } from 'vitest';
import { parseProxyPath, proxyPath } from '../../src/cubelet/rpc-wire.js';
import { MasterConfigSchema } from '../../src/config/schema.js';
import { lastSeenByNode, pendingPlacements, withRecentPlacements } from '../../src/scheduler/cluster/node-views.js';
import { densityParamsFromConfig, footprintMiB } from '../../src/scheduler/density.js';
import { NOW, node } from '../scheduler/fixtures.js';

const params = densityParamsFromConfig(MasterConfigSchema.parse({}));
const seen = (ms: number) => node('a', { lastSeen: new Date(NOW + ms).toISOString() });

describe('pendingPlacements', () => {
  const p = (at: number, nodeID = 'a') => ({ nodeID, cpus: 1, memoryMiB: 512, at: NOW + at });
  it.each([
    ['a heartbeat stamped after the node started counting it: done', p(-1), false],
    ['stamped in the same millisecond: kept (it may predate the sandbox)', p(0), true],
    ['stamped before: kept', p(1), true],
    ['still in flight: kept', { ...p(0), at: Infinity }, true],
    ['a node no longer in the views (removed): done', p(1, 'b'), false],
    ['older than any heartbeat could be: done', p(-61_000, 'b'), false],
  ])('%s', (_name, placement, kept) => {
    expect(pendingPlacements([placement], lastSeenByNode([seen(0)]), NOW)).toEqual(kept ? [placement] : []);
  });
});

describe('withRecentPlacements', () => {
  const p = (at: number, nodeID = 'a') => ({ nodeID, cpus: 2, memoryMiB: 1024, at: NOW + at });
  it.each([
    ['in flight (at = Infinity) counts', [{ ...p(0), at: Infinity }], 1],
    ['answered after the last heartbeat counts', [p(500)], 1],
    ['answered before the last heartbeat is already in the view', [p(-500)], 0],
    ['another node is untouched', [p(500, 'b')], 0],
    ['several add up', [p(100), p(200), p(-100)], 2],
  ])('%s', (_name, recent, extra) => {
    const base = seen(0);
    const [v] = withRecentPlacements([base], recent, params);
    expect(v!.sandboxes.total - base.sandboxes.total).toBe(extra);
    expect(v!.sandboxes.creating - base.sandboxes.creating).toBe(extra);
    expect(v!.usage.quotaCpuUsed - base.usage.quotaCpuUsed).toBe(2 * extra);
    expect(v!.usage.quotaMemUsedMiB - base.usage.quotaMemUsedMiB).toBeCloseTo(extra * footprintMiB({ cpus: 2, memoryMiB: 1024 }, params));
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
