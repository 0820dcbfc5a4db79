// Egress through the host's NAT against the real kernel: a stand-in internet host (TEST-NET-2
// in its own netns, test/helpers/wan.ts) is reached by a sandbox slot under the node default,
// and the node's deny list, a sandbox's denyOut, internet=false and allowOut decide as
// documented. Every refusal is paired with the same probe succeeding under another policy,
// so a broken probe or server cannot pass for a working policy.
import { execa } from 'execa';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { NsNetworkAgent } from '../../src/network/agent.js';
import { resolveEgress } from '../../src/network/egress.js';
import type { NetSlot } from '../../src/network/types.js';
import { nodeTag } from '../../src/ids.js';
import { defaultNetworkPolicy, purgeNetwork, slotRules, testCidr, uniqueNodeID } from '../helpers/kernel.js';
import { startWanHost, type WanHost } from '../helpers/wan.js';

const cidr = testCidr();
const tag = nodeTag(uniqueNodeID('egress'));
const agent = new NsNetworkAgent({ nodeTag: tag, cidr, initNum: 2, policy: defaultNetworkPolicy() });
let wan: WanHost;
let a: NetSlot;
let b: NetSlot;

/** What the wan server answered a connection from inside `netns`, or '' when none was made. */
async function fetchFrom(netns: string): Promise<string> {
  const r = await execa('ip', ['netns', 'exec', netns, 'timeout', '2', 'bash', '-c', `exec 3<>/dev/tcp/${wan.ip}/${wan.port}; cat <&3`], { reject: false });
  return r.exitCode === 0 ? r.stdout.trim() : '';
}

const rules = (sandboxID: string, req: Parameters<typeof resolveEgress>[0]) => agent.setEgress(sandboxID, resolveEgress(req, defaultNetworkPolicy().denyOut)!);

beforeAll(async () => {
  wan = await startWanHost();
  await agent.start();
  a = await agent.acquire('sbx-a');
  b = await agent.acquire('sbx-b');
});

afterAll(async () => {
  await agent.stop({ destroy: true }).catch(() => undefined);
  await purgeNetwork(tag);
  await wan?.stop();
});

describe('sandbox egress', () => {
  it('reaches an outside host through the NAT by default, seen as the host', async () => {
    expect(await fetchFrom(a.netns)).toBe(`from ${wan.hostIp}`);
  });

  it('honours internet=false, denyOut and allowOut per sandbox, keyed by its own link', async () => {
    await rules('sbx-b', { allowInternet: false });
    expect(await fetchFrom(b.netns)).toBe('');
    expect(await fetchFrom(a.netns)).toBe(`from ${wan.hostIp}`); // the neighbour is untouched

    await rules('sbx-b', { allowInternet: false, allowOut: [wan.ip] }); // replaces the previous rules
    expect(await fetchFrom(b.netns)).toBe(`from ${wan.hostIp}`);

    await rules('sbx-b', { denyOut: ['198.51.100.0/24'] });
    expect(await fetchFrom(b.netns)).toBe('');
    await rules('sbx-b', { denyOut: ['0.0.0.0/0'], allowOut: [`${wan.ip}/32`] }); // allowOut wins over its own denyOut
    expect(await fetchFrom(b.netns)).toBe(`from ${wan.hostIp}`);
  });

  it('the node default and deny list apply to every sandbox, and allowOut cannot reopen the deny list', async () => {
    await agent.setPolicy({ ...defaultNetworkPolicy(), internetDefault: false });
    try {
      expect(await fetchFrom(a.netns)).toBe('');
      expect(await fetchFrom(b.netns)).toBe(`from ${wan.hostIp}`); // its own allowOut still holds
      await rules('sbx-a', { allowInternet: true });
      expect(await fetchFrom(a.netns)).toBe(`from ${wan.hostIp}`);
      await agent.setPolicy({ ...defaultNetworkPolicy(), denyOut: [...defaultNetworkPolicy().denyOut, '198.51.100.0/24'] });
      expect(await fetchFrom(a.netns)).toBe('');
      expect(await fetchFrom(b.netns)).toBe('');
    } finally {
      await agent.setPolicy(defaultNetworkPolicy());
    }
    expect(await fetchFrom(a.netns)).toBe(`from ${wan.hostIp}`);
  });

  it('drops a sandbox rules with its slot: the next tenant of the link gets the node default', async () => {
    await rules('sbx-b', { allowInternet: false });
    expect(await fetchFrom(b.netns)).toBe('');
    await agent.release('sbx-b');
    await agent.settled();
    expect((await slotRules(tag)).has(b.index)).toBe(false);
    const again = await agent.acquire('sbx-c');
    expect(await fetchFrom(again.netns)).toBe(`from ${wan.hostIp}`);
  });

  it("refuses a forged source address (another sandbox's) at the host", async () => {
    // Raw socket in a's netns, source = b's address: without the reverse-path check it would be
    // routed (and NATed) as b's traffic. Counted by the rule that drops it.
    const counter = async () => {
      const { stdout } = await execa('nft', ['list', 'chain', 'inet', `cube_${tag}`, 'forward']);
      return Number(/fib saddr \. iif oif missing counter packets (\d+)/.exec(stdout)?.[1] ?? NaN);
    };
    const before = await counter();
    const send = `import socket; s=socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_UDP); s.setsockopt(socket.IPPROTO_IP, socket.IP_HDRINCL, 1)
import struct
src, dst = socket.inet_aton('${b.sandboxIp}'), socket.inet_aton('${wan.ip}')
udp = struct.pack('!HHHH', 40000, 9, 8, 0)
ip = struct.pack('!BBHHHBBH4s4s', 0x45, 0, 28, 1, 0, 64, 17, 0, src, dst)
s.sendto(ip + udp, ('${wan.ip}', 0))`;
    await execa('ip', ['netns', 'exec', a.netns, 'python3', '-c', send]);
    expect(await counter()).toBeGreaterThan(before);
  });
});
