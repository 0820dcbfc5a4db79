// Shared by every test that creates kernel objects: a node id (hence a tag) and a pool CIDR
// that no other test file running in parallel holds, and a count of what is left behind.
import { execFileSync } from 'node:child_process';
import { mkdirSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { readFile, readdir } from 'node:fs/promises';
import { randomBytes } from 'node:crypto';
import { execa } from 'execa';
import { afterAll, expect } from 'vitest';
import { nodeTag } from '../../src/ids.js';
import { NETNS_DIR, SYS_NET_DIR } from '../../src/network/names.js';
import { policySettingsOf, type PolicySettings } from '../../src/network/firewall.js';
import { CubeletConfigSchema } from '../../src/config/schema.js';

const TAG_LOCKS = '/tmp/cube-test-tag';
const CIDR_LOCKS = '/tmp/cube-test-cidr';
const CIDR_SECOND_OCTETS = { first: 200, last: 249 };
const HOST_ID_LOCKS = '/tmp/cube-test-hostids';

/** Whether process `pid` exists (EPERM: it does, owned by someone else). */
export function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/**
 * mkdir is atomic: the first caller owns the name. A lock whose owner died (a crashed run)
 * is taken over. Released in the caller's afterAll and, failing that, at process exit.
 */
function tryLock(dir: string, name: string, onRelease?: () => void): boolean {
  mkdirSync(dir, { recursive: true });
  const path = `${dir}/${name}`;
  try {
    mkdirSync(path);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
    let owner = 0;
    try {
      owner = Number(readFileSync(`${path}/pid`, 'utf8'));
    } catch {
      return false; // just created by someone who has not written its pid yet
    }
    if (owner > 0 && alive(owner)) return false;
    rmSync(path, { recursive: true, force: true });
    try {
      mkdirSync(path);
    } catch {
      return false;
    }
  }
  writeFileSync(`${path}/pid`, String(process.pid));
  const release = () => {
    onRelease?.();
    rmSync(path, { recursive: true, force: true });
  };
  process.once('exit', release);
  // Outside vitest (a bench script starting a test cluster) the exit releases it.
  if (process.env.VITEST) afterAll(release);
  return true;
}

function tagInUse(tag: string): boolean {
  const has = (dir: string, re: RegExp) => {
    try {
      return readdirSync(dir).some((n) => re.test(n));
    } catch {
      return false;
    }
  };
  return has(NETNS_DIR, new RegExp(`^cube-${tag}-`)) || has(SYS_NET_DIR, new RegExp(`^cube${tag}\\d`));
}

/** A node id unique to this test file and run whose tag no live test holds. */
export function uniqueNodeID(prefix: string): string {
  for (let attempt = 0; attempt < 200; attempt++) {
    const id = `${prefix}-${process.pid}-${randomBytes(4).toString('hex')}`;
    const tag = nodeTag(id);
    if (!tagInUse(tag) && tryLock(TAG_LOCKS, tag)) return id;
  }
  throw new Error('uniqueNodeID: no free node tag after 200 attempts');
}

/**
 * While a test holds a range, an `unreachable` route for all of it sits in the host's routing
 * table: addresses of it that no local link serves (a sandbox inside a netns test host, a slot
 * already gone) fail at once instead of leaving through the default gateway to a real network.
 * The links tests create carry more specific routes, which still win.
 */
function routeGuard(op: 'replace' | 'del', cidr: string): void {
  try {
    execFileSync('ip', ['route', op, 'unreachable', cidr], { stdio: 'ignore' });
  } catch {
    if (op === 'replace') throw new Error(`testCidr: could not install the unreachable route for ${cidr}`);
  }
}

/**
 * Test workers are often ended without running exit handlers, so a range's lock (and its route)
 * can outlive its owner: anything whose owner is dead is released here, at each allocation and
 * once more when the whole run ends (test/global-setup.ts).
 */
export function sweepStaleCidrLocks(): void {
  let names: string[] = [];
  try {
    names = readdirSync(CIDR_LOCKS);
  } catch {
    return;
  }
  for (const name of names) {
    let owner = 0;
    try {
      owner = Number(readFileSync(`${CIDR_LOCKS}/${name}/pid`, 'utf8'));
    } catch {
      continue; // being created right now
    }
    if (owner > 0 && alive(owner)) continue;
    routeGuard('del', `10.${name}.0.0/16`);
    rmSync(`${CIDR_LOCKS}/${name}`, { recursive: true, force: true });
  }
}

/** A /16 in 10.200.0.0-10.249.0.0 that no other test file holds until this one ends. */
export function testCidr(): string {
  sweepStaleCidrLocks();
  const { first, last } = CIDR_SECOND_OCTETS;
  const n = last - first + 1;
  const start = Math.floor(Math.random() * n);
  // A range the host already routes (a daemon of another checkout, whose locks we do not see) is
  // skipped: a daemon refuses a pool cidr that meets a route of the host (src/cubelet/host-claims.ts).
  const routed = new Set<string>();
  try {
    const routes = JSON.parse(execFileSync('ip', ['-j', '-4', 'route', 'show', 'table', 'all'], { encoding: 'utf8' }) || '[]') as {
      dst: string;
      type?: string;
    }[];
    for (const r of routes) if (r.type !== 'unreachable' && /^10\.\d+\./.test(r.dst)) routed.add(r.dst.split('.')[1]!);
  } catch {
    // no ip: take the locks alone
  }
  for (let k = 0; k < n; k++) {
    const octet = first + ((start + k) % n);
    const cidr = `10.${octet}.0.0/16`;
    if (routed.has(String(octet))) continue;
    if (tryLock(CIDR_LOCKS, String(octet), () => routeGuard('del', cidr))) {
      routeGuard('replace', cidr);
      return cidr;
    }
  }
  throw new Error(`testCidr: all ${n} test ranges are held by running tests`);
}

/**
 * Sandbox host ids (cubelet identity) no other live test daemon holds: a daemon refuses to start
 * beside a live one whose ranges overlap its own (src/cubelet/host-claims.ts). 256 ranges each
 * (a test runs at most 100 sandboxes at once), from 10^9: clear of the shipped default
 * (10^6 + 4096 ranges) that benchmarks run with and of the in-process rigs' bases.
 */
export const TEST_HOST_ID_RANGES = 256;
export function testHostIdBase(): number {
  const first = 1_000_000_000;
  const span = TEST_HOST_ID_RANGES * 65_536;
  const slots = Math.floor((2 ** 32 - 2 - first) / span);
  const start = Math.floor(Math.random() * slots);
  for (let k = 0; k < slots; k++) {
    const slot = (start + k) % slots;
    if (tryLock(HOST_ID_LOCKS, String(slot))) return first + slot * span;
  }
  throw new Error(`testHostIdBase: all ${slots} host id slots are held by running tests`);
}

export interface KernelObjects {
  netns: number;
  links: number;
  cgroups: number;
  mounts: number;
  processes: number;
  nftTables: number;
}

const CGROUP_HIERARCHIES = ['memory', 'cpu', 'pids', 'blkio', 'freezer', 'unified'];
const CGROUP_MAX_DEPTH = 6;

async function list(dir: string): Promise<string[]> {
  return readdir(dir).catch(() => []);
}

/** Directories at or below a `cube-<tag>` cgroup (the per-node parent and its sandboxes). */
async function countCgroups(match: (name: string) => boolean): Promise<number> {
  const walk = async (dir: string, depth: number, inside: boolean): Promise<number> => {
    const entries = await readdir(dir, { withFileTypes: true }).catch(() => []);
    let n = 0;
    for (const e of entries) {
      if (!e.isDirectory()) continue;
      const here = inside || match(e.name);
      if (here) n++;
      if (depth < CGROUP_MAX_DEPTH) n += await walk(`${dir}/${e.name}`, depth + 1, here);
    }
    return n;
  };
  let total = 0;
  for (const h of CGROUP_HIERARCHIES) total += await walk(`/sys/fs/cgroup/${h}`, 0, false);
  return total;
}

async function countProcesses(tag: string | undefined): Promise<number> {
  const pids = (await list('/proc')).filter((p) => /^\d+$/.test(p));
  const hits = await Promise.all(
    pids.map(async (pid) => {
      try {
        const comm = (await readFile(`/proc/${pid}/comm`, 'utf8')).trim();
        if (comm !== 'cube-init' && comm !== 'cube-launch' && comm !== 'cube-vm') return 0; // cube-vm: a microVM's QEMU
        // A zombie has exited and holds nothing: it waits for the host's pid 1 (inits are
        // reparented there by design) to reap it, which under load takes a moment.
        const stat = await readFile(`/proc/${pid}/stat`, 'utf8');
        if (stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3) === 'Z') return 0;
        if (!tag) return 1;
        const cg = await readFile(`/proc/${pid}/cgroup`, 'utf8');
        const cmd = (await readFile(`/proc/${pid}/cmdline`, 'utf8')).replaceAll('\0', ' ');
        return cg.includes(`/cube-${tag}/`) || cmd.includes(`cube-${tag}`) ? 1 : 0;
      } catch {
        return 0; // exited while we looked
      }
    }),
  );
  return hits.reduce<number>((a, b) => a + b, 0);
}

async function countMounts(needles: string[]): Promise<number> {
  const text = await readFile('/proc/self/mountinfo', 'utf8');
  return text.split('\n').filter((line) => {
    const f = line.split(' ');
    const mountPoint = f[4] ?? '';
    // netns bindings are counted as netns, not as mounts
    if (mountPoint.startsWith(`${NETNS_DIR}/`)) return false;
    return needles.some((n) => mountPoint.includes(n));
  }).length;
}

async function countNftTables(prefix: string): Promise<number> {
  const r = await execa('nft', ['list', 'tables'], { reject: false });
  return r.stdout.split('\n').filter((l) => l.trim().split(' ')[2]?.startsWith(prefix)).length;
}

/** Kernel objects named with `cube` (only those of one node tag when `tag` is given). */
export async function countKernelObjects(tag?: string): Promise<KernelObjects> {
  const netnsPrefix = tag ? `cube-${tag}-` : 'cube-';
  const linkPrefix = tag ? `cube${tag}` : 'cube';
  const [ns, links, cgroups, mounts, processes, nftTables] = await Promise.all([
    list(NETNS_DIR),
    list(SYS_NET_DIR),
    countCgroups(tag ? (n) => n === `cube-${tag}` : (n) => n.startsWith('cube-')),
    countMounts(tag ? [`cube-${tag}`, `cube${tag}`] : ['cube']),
    countProcesses(tag),
    countNftTables(tag ? `cube_${tag}` : 'cube_'),
  ]);
  return {
    netns: ns.filter((n) => n.startsWith(netnsPrefix)).length,
    links: links.filter((n) => n.startsWith(linkPrefix)).length,
    cgroups,
    mounts,
    processes,
    nftTables,
  };
}

/**
 * Teardown of an in-process node (a Cubelet on the real driver and network agent): `stop` (with
 * destroy), then no kernel object of its tag may be left (killed inits may linger as zombies
 * until the host reaps them: processes are not counted); whatever happened, `close`, the
 * network purged and `dir` removed.
 */
export async function tearDownNode(o: { tag: string; dir: string; stop: () => Promise<void> | undefined; close: () => void }): Promise<void> {
  try {
    await o.stop();
    const left = await countKernelObjects(o.tag);
    expect({ ...left, processes: 0 }).toEqual({ netns: 0, links: 0, cgroups: 0, mounts: 0, processes: 0, nftTables: 0 });
  } finally {
    o.close();
    await purgeNetwork(o.tag);
    rmSync(o.dir, { recursive: true, force: true });
  }
}

/**
 * Last-resort teardown for network tests: removes every netns, host veth and nftables
 * table of `tag`, whatever state the code under test left them in.
 */
export async function purgeNetwork(tag: string): Promise<void> {
  const ns = (await list(NETNS_DIR)).filter((n) => n.startsWith(`cube-${tag}-`));
  if (ns.length > 0) await execa('ip', ['-force', '-b', '-'], { input: ns.map((n) => `netns del ${n}`).join('\n'), reject: false });
  const deadline = Date.now() + 5_000;
  let links = (await list(SYS_NET_DIR)).filter((n) => n.startsWith(`cube${tag}`));
  while (links.length > 0 && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 50));
    links = (await list(SYS_NET_DIR)).filter((n) => n.startsWith(`cube${tag}`));
  }
  if (links.length > 0) await execa('ip', ['-force', '-b', '-'], { input: links.map((n) => `link del ${n}`).join('\n'), reject: false });
  await execa('nft', ['delete', 'table', 'inet', `cube_${tag}`], { reject: false });
  await execa('nft', ['delete', 'table', 'arp', `cube_${tag}`], { reject: false });
}

/** The network policy of a default cubelet.toml, for agents built directly in tests. */
export function defaultNetworkPolicy(): PolicySettings {
  const net = CubeletConfigSchema.parse({}).plugins['io.cubelet.internal.v1.network'];
  return policySettingsOf(net);
}

/**
 * The sandboxes' own egress rules installed on a node: slot index -> the rules of its chain
 * `sb_<index>` (counters left out), for the chains that hold any.
 */
export async function slotRules(tag: string): Promise<Map<number, string[]>> {
  const { stdout } = await execa('nft', ['list', 'table', 'inet', `cube_${tag}`]);
  const out = new Map<number, string[]>();
  for (const m of stdout.matchAll(/^\s*chain sb_(\d+) \{\n([\s\S]*?)^\s*\}/gm)) {
    const rules = m[2]!
      .split('\n')
      .map((l) => l.trim().replace(/counter packets \d+ bytes \d+ /, ''))
      .filter(Boolean);
    if (rules.length) out.set(Number(m[1]), rules);
  }
  return out;
}
