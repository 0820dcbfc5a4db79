// Two daemons on one host (issue 30 item 3): a second daemon holding the same node id, the same
// tag, an overlapping pool CIDR or overlapping sandbox host ids is refused at start (exit 3, the
// reason on stderr) before it touches anything of the first, whose sandboxes and kernel objects
// stay; a pool CIDR meeting an address of the host is refused too. An upgraded data dir (its
// kernel objects named by the 4-hex tag of versions before) keeps that tag and its sandboxes.
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { execa } from 'execa';
import { stringify as toToml } from 'smol-toml';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { SandboxView } from '../../src/api/types.js';
import { legacyNodeTag, nodeTag } from '../../src/ids.js';
import { TEST_HOST_ID_RANGES, countKernelObjects, testCidr, testHostIdBase, uniqueNodeID } from '../helpers/kernel.js';
import { adminExec, call, startDaemon, type TestDaemon } from '../helpers/daemon.js';

let a: TestDaemon;
let sandboxID: string;
const dirs: string[] = [];

beforeAll(async () => {
  a = await startDaemon();
  const r = await call(a, 'POST', '/admin/v1/sandboxes', { timeoutSec: 600 });
  expect(r.status, r.text).toBe(201);
  sandboxID = (r.json as SandboxView).sandboxID;
}, 120_000);

afterAll(async () => {
  await a?.stop();
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
}, 120_000);

const toml = (path: string) => readFileSync(path, 'utf8');

/** A second `cubed` with its own dirs and the given cubelet.toml facts; waits for its exit (it must not start). */
async function second(o: { nodeID?: string; cidr?: string; hostIdBase?: number; dataDirFiles?: Record<string, string> }) {
  const dir = mkdtempSync('/tmp/cubed-test-second-');
  dirs.push(dir);
  const dataDir = join(dir, 'data');
  mkdirSync(dataDir);
  for (const [name, text] of Object.entries(o.dataDirFiles ?? {})) writeFileSync(join(dataDir, name), text);
  writeFileSync(
    join(dir, 'cubelet.toml'),
    toToml({
      node_id: o.nodeID ?? uniqueNodeID('second'),
      identity: { host_id_base: o.hostIdBase ?? testHostIdBase(), host_id_ranges: TEST_HOST_ID_RANGES },
      plugins: { 'io.cubelet.internal.v1.network': { tap_init_num: 2, cidr: o.cidr ?? testCidr() } },
    }),
  );
  writeFileSync(join(dir, 'cubemaster.yaml'), toml(join(a.configDir, 'cubemaster.yaml')).replace(/listen: .*/, 'listen: 127.0.0.1:0'));
  // Under the code before, this daemon started (and swept the first's sandboxes): it is stopped after 60 s.
  return execa(process.execPath, ['bin/cubed', '--config-dir', dir, '--data-dir', dataDir, '--listen', '127.0.0.1:0'], {
    reject: false,
    timeout: 60_000,
    env: { ...process.env, CUBE_API_KEY: 'e2b_second' },
  });
}

/** The first daemon is untouched: its sandbox runs, its table, netns and links are there. */
async function firstIntact(before: Awaited<ReturnType<typeof countKernelObjects>>) {
  expect((await adminExec(a, sandboxID, ['echo', 'alive'])).stdout).toBe('alive\n');
  const now = await countKernelObjects(a.tag);
  expect(now.nftTables).toBeGreaterThan(0);
  expect({ netns: now.netns, links: now.links, nftTables: now.nftTables, processes: now.processes }).toEqual({
    netns: before.netns,
    links: before.links,
    nftTables: before.nftTables,
    processes: before.processes,
  });
}

describe('a second daemon on the host', () => {
  it('with the same node id is refused (exit 3) and the first keeps its sandboxes, netns and nftables table', async () => {
    const before = await countKernelObjects(a.tag);
    const r = await second({ nodeID: a.nodeID });
    expect(r.exitCode, r.stderr).toBe(3);
    expect(r.stderr).toContain(`node id "${a.nodeID}" is held by cubed pid ${a.pid}`);
    await firstIntact(before);
  });

  it('with the same tag (a copied data dir) is refused', async () => {
    const before = await countKernelObjects(a.tag);
    const r = await second({ dataDirFiles: { 'node-tag': `${a.tag}\n` } });
    expect(r.exitCode, r.stderr).toBe(3);
    expect(r.stderr).toContain(`node tag ${a.tag}`);
    await firstIntact(before);
  });

  it('with an overlapping pool cidr is refused', async () => {
    const before = await countKernelObjects(a.tag);
    const cidr = toml(join(a.configDir, 'cubelet.toml')).match(/cidr = "([^"]+)"/)![1]!;
    const inside = cidr.replace(/\.0\.0\/16$/, '.64.0/18');
    const r = await second({ cidr: inside });
    expect(r.exitCode, r.stderr).toBe(3);
    expect(r.stderr).toContain(`pool cidr ${inside} overlaps ${cidr} of cubed pid ${a.pid}`);
    await firstIntact(before);
  });

  it('with overlapping sandbox host ids is refused', async () => {
    const before = await countKernelObjects(a.tag);
    const base = Number(toml(join(a.configDir, 'cubelet.toml')).match(/host_id_base = (\d+)/)![1]);
    const r = await second({ hostIdBase: base + 65_536 * 3 });
    expect(r.exitCode, r.stderr).toBe(3);
    expect(r.stderr).toMatch(new RegExp(`sandbox host ids ${base + 65_536 * 3}-\\d+ overlap ${base}-\\d+ of cubed pid ${a.pid}`));
    await firstIntact(before);
  });

  it('whose pool cidr meets an address of the host is refused; apart from everything, it starts', async () => {
    const cidr = testCidr();
    const link = `cubehc${randomBytes(3).toString('hex')}`;
    const peer = `${link}p`;
    const addr = cidr.replace(/0\.0\/16$/, '7.1/24');
    await execa('ip', ['link', 'add', link, 'type', 'veth', 'peer', 'name', peer]);
    try {
      await execa('ip', ['addr', 'add', addr, 'dev', link]);
      const r = await second({ cidr });
      expect(r.exitCode, r.stderr).toBe(3);
      expect(r.stderr).toContain(`pool cidr ${cidr} overlaps the host's address ${addr.split('/')[0]} on ${link}`);
    } finally {
      await execa('ip', ['link', 'del', link], { reject: false });
    }
    // Nothing in the way: a second daemon runs beside the first (the route guard over a test range carries no traffic).
    const b = await startDaemon({ cidr });
    try {
      expect((await call(b, 'POST', '/admin/v1/sandboxes', {})).status).toBe(201);
      expect((await adminExec(a, sandboxID, ['echo', 'alive'])).stdout).toBe('alive\n');
    } finally {
      await b.stop();
    }
  }, 180_000);
});

describe('an upgraded data dir', () => {
  it('keeps the 4-hex tag its kernel objects carry and re-adopts its sandboxes; a new one gets the 6-character tag', async () => {
    expect(a.tag).toBe(nodeTag(a.nodeID));
    expect(a.tag).toMatch(/^[g-z][a-z0-9]{5}$/);
    const nodeID = uniqueNodeID('legacy');
    const legacy = legacyNodeTag(nodeID);
    // The objects a version before this one made are named by the 4-hex tag: a daemon given it makes the same.
    const d = await startDaemon({ nodeID, cidr: testCidr(), dataDirFiles: { 'node-tag': `${legacy}\n` } });
    try {
      expect(d.tag).toBe(legacy);
      const s = (await call(d, 'POST', '/admin/v1/sandboxes', { timeoutSec: 600 })).json as SandboxView;
      await d.stop({ destroy: false });
      expect((await countKernelObjects(legacy)).processes).toBe(1);
      // As that version left it: no record of the tag.
      rmSync(join(d.dataDir, 'node-tag'));
      await d.restart();
      expect(readFileSync(join(d.dataDir, 'node-tag'), 'utf8').trim()).toBe(legacy);
      expect((await adminExec(d, s.sandboxID, ['echo', 'readopted'])).stdout).toBe('readopted\n');
      expect((await countKernelObjects(nodeTag(nodeID))).netns).toBe(0);
    } finally {
      await d.stop();
    }
  }, 180_000);
});
