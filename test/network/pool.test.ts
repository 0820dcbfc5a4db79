// The slot pool against the real kernel: fill, acquire, release (reset or retire), bursts,
// exhaustion, crash recovery and a clean tear-down.
import { existsSync } from 'node:fs';
import { afterAll, describe, expect, it } from 'vitest';
import { execa } from 'execa';
import { NsNetworkAgent } from '../../src/network/agent.js';
import type { PoolNotice } from '../../src/network/pool.js';
import { VERIFY_EVERY } from '../../src/network/slot.js';
import type { NetSlot } from '../../src/network/types.js';
import { nodeTag } from '../../src/ids.js';
import { CubeError } from '../../src/errors.js';
import { defaultNetworkPolicy, countKernelObjects, purgeNetwork, testCidr, uniqueNodeID } from '../helpers/kernel.js';

const cidr = testCidr();
const tag = nodeTag(uniqueNodeID('pool'));
const agents: NsNetworkAgent[] = [];

function agent(initNum: number, more: { cidr?: string; onNotice?: (n: PoolNotice) => void } = {}): NsNetworkAgent {
  const a = new NsNetworkAgent({
    nodeTag: tag,
    cidr: more.cidr ?? cidr,
    initNum,
    policy: defaultNetworkPolicy(),
    ...(more.onNotice ? { onNotice: more.onNotice } : {}),
  });
  agents.push(a);
  return a;
}

afterAll(async () => {
  for (const a of agents) await a.stop({ destroy: true }).catch(() => undefined);
  await purgeNetwork(tag);
});

async function waitFor(cond: () => boolean | Promise<boolean>, what: string): Promise<void> {
  const deadline = Date.now() + 10_000;
  while (!(await cond())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

const ids = (n: number, prefix: string) => Array.from({ length: n }, (_, i) => `${prefix}${i}`);

function distinctIndices(slots: NetSlot[]): number {
  return new Set(slots.map((s) => s.index)).size;
}

describe('network slot pool', () => {
  it('fills to tap_init_num, hands out slots and takes them back after a reset', async () => {
    const a = agent(4);
    await a.start();
    expect(a.levels()).toMatchObject({ free: 4, inUse: 0, creating: 0, total: 4, target: 4, inFlight: 0, onDemand: 0 });
    expect(await countKernelObjects(tag)).toMatchObject({ netns: 4, links: 4, nftTables: 2 }); // inet (policy) and arp (link filter)

    const s = await a.acquire('sbx-a');
    expect(s.netns).toBe(`cube-${tag}-${s.index}`);
    expect(s.hostIf).toBe(`cube${tag}${s.index}`);
    expect(s.hostIf.length).toBeLessThanOrEqual(15);
    expect(existsSync(s.netnsPath)).toBe(true);
    expect(s.hostIp.split('.').slice(0, 2)).toEqual(cidr.split('.').slice(0, 2));
    expect(await a.acquire('sbx-a')).toBe(s);
    expect(a.slotOf('sbx-a')).toBe(s);
    expect(a.levels()).toMatchObject({ inUse: 1, onDemand: 0 });
    expect(a.levels().recentWaitsMs).toHaveLength(1);

    // Inside the netns: eth0 carries the sandbox address, the default route goes via the host end.
    const addr = await execa('ip', ['-n', s.netns, '-4', '-o', 'addr', 'show', 'dev', 'eth0']);
    expect(addr.stdout).toContain(`${s.sandboxIp}/30`);
    const route = await execa('ip', ['-n', s.netns, 'route', 'show', 'default']);
    expect(route.stdout).toContain(`via ${s.hostIp} dev eth0`);

    await waitFor(() => a.levels().free === 4, 'background refill to the target');
    const mac = async () => (await execa('ip', ['-n', s.netns, '-j', 'link', 'show', 'dev', 'eth0'])).stdout;
    const macBefore = await mac();
    await a.release('sbx-a');
    await a.settled();
    expect(a.slotOf('sbx-a')).toBeUndefined();
    expect(a.levels()).toMatchObject({ free: 5, inUse: 0, total: 5 });
    // Reused in place, not recreated (a new veth would have a new random MAC).
    expect(await mac()).toBe(macBefore);
    await a.release('sbx-a'); // idempotent
    await a.stop({ destroy: true });
  });

  it('retires a slot the sandbox changed instead of handing it out again', async () => {
    const a = agent(2);
    await a.start();
    const s = await a.acquire('tamper');
    await execa('ip', ['-n', s.netns, 'addr', 'add', '192.0.2.77/32', 'dev', 'lo']);
    await a.release('tamper');
    await a.settled();
    expect(existsSync(s.netnsPath)).toBe(false);
    // Its index comes back once the kernel has dropped the host veth; the pool refills.
    await waitFor(() => a.levels().free === 2 && a.levels().creating === 0, 'refill after retirement');
    await a.stop({ destroy: true });
  });

  it('reads a returned slot back in full on its first return and every VERIFY_EVERY-th release, and retires it if changed', async () => {
    const a = agent(1);
    await a.start();
    const cycle = async (before?: (s: NetSlot) => Promise<unknown>) => {
      const s = await a.acquire('again');
      await before?.(s);
      await a.release('again');
      await a.settled();
      return s;
    };
    const first = await cycle();
    expect(a.verifications).toBe(1);
    for (let i = 1; i < VERIFY_EVERY; i++) expect((await cycle()).netns).toBe(first.netns); // reused, host-side checks only
    expect(a.verifications).toBe(1);
    // The next release is sampled: a change made by the sandbox is found and the slot retired.
    const tampered = await cycle((s) => execa('ip', ['-n', s.netns, 'addr', 'add', '192.0.2.78/32', 'dev', 'lo']));
    expect(tampered.netns).toBe(first.netns);
    expect(a.verifications).toBe(2);
    expect(existsSync(tampered.netnsPath)).toBe(false);
    await a.stop({ destroy: true });
  });

  it('retires a slot a process still holds', async () => {
    const a = agent(1);
    await a.start();
    const s = await a.acquire('held');
    const sleeper = execa('ip', ['netns', 'exec', s.netns, 'sleep', '30'], { reject: false });
    try {
      await waitFor(async () => (await execa('ip', ['netns', 'pids', s.netns])).stdout.trim() !== '', 'the sleeper to enter the netns');
      await a.release('held');
      await a.settled();
      expect(existsSync(s.netnsPath)).toBe(false);
      expect((await a.acquire('next')).index).not.toBe(s.index);
      // The host veth lives as long as the process holds the netns.
      expect(existsSync(`/sys/class/net/${s.hostIf}`)).toBe(true);
    } finally {
      sleeper.kill('SIGKILL');
      await sleeper;
    }
    await waitFor(() => !existsSync(`/sys/class/net/${s.hostIf}`), 'the held veth to go with its process');
    await a.stop({ destroy: true });
  });

  it('serves 50 concurrent acquires from a warm pool without creating on demand', async () => {
    const a = agent(50);
    await a.start();
    const slots = await Promise.all(ids(50, 'warm').map((id) => a.acquire(id)));
    expect(distinctIndices(slots)).toBe(50);
    expect(a.levels()).toMatchObject({ inUse: 50, onDemand: 0, inFlight: 0 });
    await Promise.all(ids(50, 'warm').map((id) => a.release(id)));
    await a.settled();
    expect(a.levels().inUse).toBe(0);
    await a.stop({ destroy: true });
  });

  it('serves 50 concurrent acquires from an empty pool on demand, in coalesced batches', async () => {
    const notices: PoolNotice[] = [];
    const a = agent(0, { onNotice: (n) => notices.push(n) });
    await a.start();
    expect(a.levels()).toMatchObject({ free: 0, total: 0 });
    const spawnsBefore = a.spawns;
    const pending = ids(50, 'cold').map((id) => a.acquire(id));
    const slots = await Promise.all(pending);
    expect(distinctIndices(slots)).toBe(50);
    for (const s of slots) expect(existsSync(s.netnsPath)).toBe(true);
    expect(a.levels()).toMatchObject({ inUse: 50, onDemand: 50, inFlight: 0 });
    expect(a.levels().recentWaitsMs).toHaveLength(32);
    expect(a.levels().waitP99Ms).toBeGreaterThanOrEqual(a.levels().waitP50Ms);
    // One `ip -n` per slot plus one root batch for the whole burst (not one per request).
    expect(a.spawns - spawnsBefore).toBeLessThanOrEqual(50 + 2);
    expect(notices).toHaveLength(1);
    expect(notices[0]).toMatchObject({ kind: 'pool.exhausted' });
    await a.stop({ destroy: true });
  });

  it('refills to tap_init_num after a burst empties it, while the burst still holds its slots', async () => {
    // A 20-create burst on tap_init_num = 4 used to leave free at 0 until the next acquire or
    // release: the on-demand slots went to the waiters and nothing asked for a refill after.
    const a = agent(4);
    await a.start();
    const slots = await Promise.all(ids(20, 'burst').map((id) => a.acquire(id)));
    expect(distinctIndices(slots)).toBe(20);
    await waitFor(() => a.levels().free === 4, 'the pool back at its target of 4 free');
    expect(a.levels()).toMatchObject({ free: 4, inUse: 20, creating: 0 });
    // The next create takes a warm slot.
    const onDemand = a.levels().onDemand;
    await a.acquire('after-burst');
    expect(a.levels().onDemand).toBe(onDemand);
    await a.stop({ destroy: true });
  });

  it('says NETWORK_FAILED when the range is exhausted', async () => {
    const small = `${cidr.split('.').slice(0, 2).join('.')}.255.0/29`; // one slot
    const a = agent(1, { cidr: small });
    await a.start();
    await a.acquire('only');
    const err = await a.acquire('one-too-many').catch((e: unknown) => e);
    expect(err).toBeInstanceOf(CubeError);
    expect((err as CubeError).kind).toBe('NETWORK_FAILED');
    expect((err as CubeError).message).toMatch(/exhausted/);
    expect(a.levels().inFlight).toBe(0);
    await a.stop({ destroy: true });
  });

  it('stop({destroy: false}) keeps slots in use; stop({destroy: true}) leaves nothing of the tag', async () => {
    const a = agent(3);
    await a.start();
    const s = await a.acquire('survivor');
    await a.settled();
    await a.stop({ destroy: false });
    expect(await countKernelObjects(tag)).toMatchObject({ netns: 1, links: 1, nftTables: 2 }); // inet (policy) and arp (link filter)
    expect(existsSync(s.netnsPath)).toBe(true);

    const b = agent(3);
    await b.start(new Map([['survivor', s.index]]));
    expect(b.slotOf('survivor')).toMatchObject({ index: s.index, netns: s.netns });
    await b.stop({ destroy: true });
    expect(await countKernelObjects(tag)).toEqual({ netns: 0, links: 0, cgroups: 0, mounts: 0, processes: 0, nftTables: 0 });
  });

  it('start() after a crash removes stale slots and re-adopts the kept ones', async () => {
    const crashed = agent(3);
    await crashed.start();
    const keep = await crashed.acquire('keep');
    const drop = await crashed.acquire('drop');
    await crashed.settled();
    // Marks tell a surviving netns from a recreated one (nsfs inode numbers get reused).
    const mark = (ns: string) => execa('ip', ['-n', ns, 'addr', 'add', '192.0.2.9/32', 'dev', 'lo']);
    const marked = async (ns: string) =>
      existsSync(`/run/netns/${ns}`) && (await execa('ip', ['-n', ns, 'addr', 'show', 'dev', 'lo'])).stdout.includes('192.0.2.9');
    await mark(keep.netns);
    await mark(drop.netns);
    // No stop(): the process "died" here, leaving its kernel objects.
    const before = await countKernelObjects(tag);
    expect(before.netns).toBeGreaterThanOrEqual(5);

    const next = agent(2);
    await next.start(new Map([['keep', keep.index]]));
    expect(next.slotOf('keep')).toMatchObject({ index: keep.index, sandboxIp: keep.sandboxIp });
    expect(next.slotOf('drop')).toBeUndefined();
    expect(await marked(keep.netns)).toBe(true);
    // The dropped slot's netns was removed (its index may have been recreated fresh).
    expect(await marked(drop.netns)).toBe(false);
    expect(next.levels()).toMatchObject({ inUse: 1, free: 2, total: 3 });
    expect(await countKernelObjects(tag)).toMatchObject({ netns: 3, links: 3, nftTables: 2 }); // inet (policy) and arp (link filter)
    await next.stop({ destroy: true });
    expect(await countKernelObjects(tag)).toMatchObject({ netns: 0, links: 0, nftTables: 0 });
  });
});
