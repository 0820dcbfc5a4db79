// The pool's TAP mode against the real kernel: slots made with their TAP and the guest's NAT
// ready, handed out warm, taken back with the TAP made anew (whatever the last tenant left on
// it), a pool per mode with its own target, and a kill -9 in the middle of making TAP slots
// reconciled by the next start with nothing left behind.
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { execa } from 'execa';
import { NsNetworkAgent } from '../../src/network/agent.js';
import { GATEWAY_IP, TAP_NAME, TAP_NAT_TABLE, slotModeOf } from '../../src/network/tap.js';
import type { NetSlot } from '../../src/network/types.js';
import { nodeTag } from '../../src/ids.js';
import { CubeError } from '../../src/errors.js';
import { countKernelObjects, defaultNetworkPolicy, purgeNetwork, testCidr, uniqueNodeID } from '../helpers/kernel.js';

const cidr = testCidr();
const tag = nodeTag(uniqueNodeID('tap'));
const agents: NsNetworkAgent[] = [];
const NOTHING = { netns: 0, links: 0, cgroups: 0, mounts: 0, processes: 0, nftTables: 0 };

function agent(initNum: number, tapInitNum: number): NsNetworkAgent {
  const a = new NsNetworkAgent({ nodeTag: tag, cidr, initNum, tapInitNum, policy: defaultNetworkPolicy() });
  agents.push(a);
  return a;
}

afterAll(async () => {
  for (const a of agents) await a.stop({ destroy: true }).catch(() => undefined);
  await purgeNetwork(tag);
});

const inNetns = (s: NetSlot, cmd: string, args: string[]) => execa('nsenter', [`--net=${s.netnsPath}`, '--', cmd, ...args], { reject: false });

/** The TAP as `ip -j` reports it inside the slot's netns. */
async function tapLink(s: NetSlot): Promise<{ ifindex: number; mtu: number; flags: string[] }> {
  const r = await execa('ip', ['-n', s.netns, '-j', 'link', 'show', 'dev', TAP_NAME]);
  return (JSON.parse(r.stdout) as { ifindex: number; mtu: number; flags: string[] }[])[0]!;
}

async function natRules(s: NetSlot): Promise<string> {
  return (await inNetns(s, 'nft', ['list', 'table', 'ip', TAP_NAT_TABLE])).stdout;
}

describe('network pool, TAP mode', () => {
  it('makes TAP slots ready for a microVM, a pool per mode with its own target', async () => {
    const a = agent(1, 2);
    await a.start();
    expect(a.levels('tap')).toMatchObject({ free: 2, inUse: 0, total: 2, target: 2 });
    expect(a.levels()).toMatchObject({ free: 1, total: 1, target: 1 });
    expect(await countKernelObjects(tag)).toMatchObject({ netns: 3, links: 3 });

    const s = await a.acquire('vm-a', 'tap');
    expect(s.tap).toBe(TAP_NAME);
    expect(TAP_NAME.startsWith('cube')).toBe(true);
    expect(s.netns).toBe(`cube-${tag}-${s.index}`);
    expect(a.levels('tap')).toMatchObject({ inUse: 1, onDemand: 0 });
    expect(a.levels()).toMatchObject({ inUse: 0, free: 1 });
    expect(a.slotOf('vm-a')).toBe(s);
    // The TAP is up with the guest's gateway address; forwarding is on; the NAT table translates.
    expect((await tapLink(s)).flags).toContain('UP');
    expect((await execa('ip', ['-n', s.netns, '-4', '-o', 'addr', 'show', 'dev', TAP_NAME])).stdout).toContain(`${GATEWAY_IP}/24`);
    expect((await inNetns(s, 'cat', ['/proc/sys/net/ipv4/ip_forward'])).stdout.trim()).toBe('1');
    expect(await natRules(s)).toMatch(/iifname "eth0" dnat to 10\.0\.2\.15[\s\S]*oifname "eth0" masquerade/);

    // An ns slot has no TAP; one sandbox holds one slot of one mode.
    const n = await a.acquire('ct-a');
    expect(n.tap).toBeUndefined();
    expect((await execa('ip', ['-n', n.netns, '-o', 'link'])).stdout).not.toContain(TAP_NAME);
    const err = await a.acquire('vm-a', 'ns').catch((e: unknown) => e);
    expect(err).toBeInstanceOf(CubeError);
    expect((err as CubeError).kind).toBe('CONFLICT');
    expect(await a.acquire('vm-a', 'tap')).toBe(s);

    await a.release('vm-a');
    await a.release('ct-a');
    await a.settled();
    // Back in their pools (the surplus over the target is trimmed after 5 s without an acquire).
    expect(a.levels('tap').inUse).toBe(0);
    expect(a.levels('tap').free).toBeGreaterThanOrEqual(2);
    expect(a.levels().inUse).toBe(0);
    expect(a.levels().free).toBeGreaterThanOrEqual(1);
    await a.stop({ destroy: true });
    expect(await countKernelObjects(tag)).toEqual(NOTHING);
  });

  it('reuses a returned TAP slot in place, its TAP made anew', async () => {
    const a = agent(0, 0); // no refill beside it: the returned slot is the only free one
    await a.start();
    const s = await a.acquire('vm-b', 'tap');
    const eth0 = async () => (await execa('ip', ['-n', s.netns, '-j', 'link', 'show', 'dev', 'eth0'])).stdout;
    const [eth0Before, tapBefore] = [await eth0(), await tapLink(s)];
    await a.release('vm-b');
    await a.settled();
    const again = await a.acquire('vm-c', 'tap');
    expect(again.netns).toBe(s.netns); // reused, not recreated (a new veth would have a new MAC)
    expect(await eth0()).toBe(eth0Before);
    expect((await tapLink(again)).ifindex).not.toBe(tapBefore.ifindex); // a fresh device
    expect(a.levels('tap')).toMatchObject({ onDemand: 1, inUse: 1 }); // the first one only
    await a.release('vm-c');
    await a.stop({ destroy: true });
    expect(await countKernelObjects(tag)).toEqual(NOTHING);
  });

  it('a TAP returned dirty (MTU, neighbours, NAT rules, translated connections) comes back clean', async () => {
    const a = agent(0, 0);
    await a.start();
    const s = await a.acquire('vm-dirty', 'tap');
    // What QEMU or a guest can leave behind, and more.
    await execa('ip', ['-n', s.netns, 'link', 'set', 'dev', TAP_NAME, 'mtu', '9000']);
    await execa('ip', ['-n', s.netns, 'neigh', 'replace', '10.0.2.15', 'lladdr', '02:00:0a:00:02:0f', 'dev', TAP_NAME]);
    await inNetns(s, 'nft', ['flush', 'chain', 'ip', TAP_NAT_TABLE, 'pre']);
    const conntrack = (args: string[]) => inNetns(s, 'conntrack', args);
    const inserted = await conntrack([
      '-I',
      '-p',
      'tcp',
      '-s',
      '10.0.2.15',
      '-d',
      '192.0.2.1',
      '--sport',
      '40000',
      '--dport',
      '80',
      '--state',
      'ESTABLISHED',
      '-t',
      '600',
      '-u',
      'ASSURED',
    ]);
    expect(inserted.exitCode).toBe(0);
    expect((await conntrack(['-L'])).stdout).toContain('192.0.2.1');

    await a.release('vm-dirty');
    await a.settled();
    const next = await a.acquire('vm-next', 'tap');
    expect(next.netns).toBe(s.netns);
    expect((await tapLink(next)).mtu).toBe(1500);
    expect((await execa('ip', ['-n', next.netns, 'neigh', 'show', 'dev', TAP_NAME])).stdout.trim()).toBe('');
    expect(await natRules(next)).toMatch(/iifname "eth0" dnat to 10\.0\.2\.15/);
    expect((await conntrack(['-L'])).stdout).not.toContain('192.0.2.1');
    await a.release('vm-next');
    await a.stop({ destroy: true });
    expect(await countKernelObjects(tag)).toEqual(NOTHING);
  });

  it('kill -9 while TAP slots are being made: the next start re-adopts the kept one and removes the rest', async () => {
    const child = spawn(process.execPath, ['--import', 'tsx', join(import.meta.dirname, 'fixtures', 'tap-agent.ts'), tag, cidr], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    const lines = createInterface({ input: child.stdout! })[Symbol.asyncIterator]();
    let kept: { index: number; netns: string };
    let keptTap: { ifindex: number };
    try {
      kept = JSON.parse((await lines.next()).value as string) as { index: number; netns: string };
      keptTap = await tapLink({ netns: kept.netns } as NetSlot);
      expect((await lines.next()).value).toBe('burst');
      // Dies with slots in every state: made, half-made (no TAP yet), asked for.
      for (;;) {
        if ((await countKernelObjects(tag)).netns > 3) break;
        await new Promise((r) => setTimeout(r, 10));
      }
    } finally {
      child.kill('SIGKILL');
      await new Promise((r) => (child.exitCode !== null || child.signalCode !== null ? r(undefined) : child.once('exit', r)));
    }
    expect((await countKernelObjects(tag)).netns).toBeGreaterThan(1);

    const next = agent(0, 1);
    await next.start(new Map([['vm-keep', kept.index]]), new Map(), new Set(['vm-keep']));
    const s = next.slotOf('vm-keep')!;
    expect(s).toMatchObject({ index: kept.index, netns: kept.netns, tap: TAP_NAME });
    expect((await tapLink(s)).ifindex).toBe(keptTap.ifindex); // the running VM's TAP, untouched
    expect(next.levels('tap')).toMatchObject({ inUse: 1, free: 1, total: 2 });
    expect(await countKernelObjects(tag)).toMatchObject({ netns: 2, links: 2, processes: 0 });
    // Released, it goes back through the TAP reset like any other.
    await next.release('vm-keep');
    await next.settled();
    expect(next.levels('tap').inUse).toBe(0);
    expect(next.levels('tap').free).toBeGreaterThanOrEqual(1);
    await next.stop({ destroy: true });
    expect(await countKernelObjects(tag)).toEqual(NOTHING);
  });

  it('microVMs take TAP slots, every other runtime an ns one', () => {
    expect(slotModeOf('microvm')).toBe('tap');
    expect(slotModeOf('ns')).toBe('ns');
    expect(slotModeOf('sim')).toBe('ns');
  });
});
