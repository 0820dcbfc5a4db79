// The pure half of the host claims (src/cubelet/host-claims.ts) and the tag of a data dir.
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { dataDirTag, hostConflicts, routeConflicts, type HostClaim } from '../../src/cubelet/host-claims.js';
import { isNodeTag, legacyNodeTag, nodeTag } from '../../src/ids.js';
import { hostIfName, hostIfIndex } from '../../src/network/names.js';
import { MAX_SLOT_INDEX } from '../../src/network/ipam.js';

const base: HostClaim = { pid: 1, nodeID: 'a', tag: nodeTag('a'), dataDir: '/a', netns: 'net:[1]', cidr: '10.213.0.0/16', hostIds: [1_000_000, 1_999_999] };
const other = (o: Partial<HostClaim>): HostClaim => ({
  ...base,
  pid: 2,
  nodeID: 'b',
  tag: nodeTag('b'),
  dataDir: '/b',
  cidr: '10.214.0.0/16',
  hostIds: [2_000_000, 2_999_999],
  ...o,
});

describe('hostConflicts', () => {
  it('apart in everything: none', () => {
    expect(hostConflicts(base, [other({})])).toEqual([]);
  });
  it('names each fact held by a live daemon, with its pid and data dir', () => {
    expect(hostConflicts(base, [other({ nodeID: 'a', tag: base.tag })])).toEqual([
      expect.stringMatching(/^node id "a" is held by cubed pid 2 \(node id "a", data dir \/b\)/),
    ]);
    expect(hostConflicts(base, [other({ tag: base.tag })])).toEqual([expect.stringContaining(`node tag ${base.tag}`)]);
    expect(hostConflicts(base, [other({ cidr: '10.213.128.0/17' })])).toEqual([
      expect.stringContaining('pool cidr 10.213.0.0/16 overlaps 10.213.128.0/17 of cubed pid 2'),
    ]);
    expect(hostConflicts(base, [other({ hostIds: [1_999_999, 3_000_000] })])).toEqual([
      expect.stringContaining('sandbox host ids 1000000-1999999 overlap 1999999-3000000'),
    ]);
  });
  it("pools of two network namespaces never meet; host ids are the host's in any", () => {
    expect(hostConflicts(base, [other({ cidr: base.cidr!, netns: 'net:[2]' })])).toEqual([]);
    expect(hostConflicts(base, [other({ hostIds: base.hostIds!, netns: 'net:[2]' })])).toHaveLength(1);
  });
});

describe('routeConflicts', () => {
  const tag = nodeTag('a');
  it('a route or address inside or around the range conflicts', () => {
    expect(routeConflicts('10.213.0.0/16', tag, [{ dst: '10.213.5.0/24', dev: 'eth1' }])).toEqual([
      expect.stringContaining("the host's route 10.213.5.0/24 on eth1"),
    ]);
    expect(routeConflicts('10.213.0.0/16', tag, [{ dst: '10.0.0.0/8', dev: 'wg0' }])).toHaveLength(1);
    expect(routeConflicts('10.213.0.0/16', tag, [{ type: 'local', dst: '10.213.9.9', dev: 'eth1', table: 'local' }])).toEqual([
      expect.stringContaining("the host's address 10.213.9.9 on eth1 (table local)"),
    ]);
    expect(routeConflicts('10.213.0.0/16', tag, [{ dst: '10.213.0.4/30', dev: hostIfName(nodeTag('b'), 1) }])).toHaveLength(1);
  });
  it('the default route, routes that carry no traffic, ranges apart and our own links do not', () => {
    expect(
      routeConflicts('10.213.0.0/16', tag, [
        { dst: 'default', dev: 'eth0' },
        { type: 'unreachable', dst: '10.213.0.0/16' },
        { type: 'blackhole', dst: '10.0.0.0/8' },
        { dst: '10.214.0.0/16', dev: 'eth1' },
        { dst: '10.213.0.4/30', dev: hostIfName(tag, 1) },
        { type: 'local', dst: '10.213.0.5', dev: hostIfName(tag, 1), table: 'local' },
      ]),
    ).toEqual([]);
  });
});

describe('node tags', () => {
  it('6 characters, never starting like a 4-hex one, and the link name fits IFNAMSIZ at the highest index', () => {
    const tags = new Set<string>();
    for (let i = 0; i < 2000; i++) {
      const t = nodeTag(`node-${i}`);
      expect(t).toMatch(/^[g-z][a-z0-9]{5}$/);
      expect(isNodeTag(t)).toBe(true);
      tags.add(t);
    }
    expect(tags.size).toBe(2000);
    const t = nodeTag('x');
    expect(hostIfName(t, MAX_SLOT_INDEX).length).toBeLessThanOrEqual(15);
    // A 4-hex tag's link is never read as one of a 6-character tag's, nor the other way.
    const old = legacyNodeTag('x');
    expect(isNodeTag(old)).toBe(true);
    expect(hostIfIndex(old, hostIfName(t, 12))).toBeUndefined();
    expect(hostIfIndex(t, hostIfName(old, 12))).toBeUndefined();
  });

  const dirs: string[] = [];
  afterAll(() => {
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
  });
  const fresh = () => {
    const d = mkdtempSync('/tmp/cube-tag-');
    dirs.push(d);
    return d;
  };
  it('a data dir keeps the tag it records; a new one records the 6-character tag; one an older version ran in, the 4-hex one', () => {
    const a = fresh();
    expect(dataDirTag(a, 'n1')).toBe(nodeTag('n1'));
    expect(readFileSync(join(a, 'node-tag'), 'utf8')).toBe(`${nodeTag('n1')}\n`);
    // Renamed node: the data dir's objects keep their names.
    expect(dataDirTag(a, 'n2')).toBe(nodeTag('n1'));
    const b = fresh();
    mkdirSync(join(b, 'sandboxes'));
    expect(dataDirTag(b, 'n1')).toBe(legacyNodeTag('n1'));
    const c = fresh();
    writeFileSync(join(c, 'node-tag'), '../etc\n');
    expect(() => dataDirTag(c, 'n1')).toThrow(/not a node tag/);
  });
});
