// The nftables policy against the real kernel: a sandbox netns reaches its own host end
// and answers the host, but reaches no host service (on any host address) and no other
// sandbox. Each "cannot connect" is also shown to connect once host access is allowed,
// so the test fails if the listener or the probe is broken rather than the policy.
import { createServer, connect, type Server } from 'node:net';
import { networkInterfaces } from 'node:os';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { execa, type ResultPromise } from 'execa';
import { NsNetworkAgent } from '../../src/network/agent.js';
import type { NetSlot } from '../../src/network/types.js';
import { nodeTag } from '../../src/ids.js';
import { defaultNetworkPolicy, purgeNetwork, testCidr, uniqueNodeID } from '../helpers/kernel.js';

const cidr = testCidr();
const tag = nodeTag(uniqueNodeID('isolation'));
const agent = new NsNetworkAgent({ nodeTag: tag, cidr, initNum: 2, policy: defaultNetworkPolicy() });
let a: NetSlot;
let b: NetSlot;
let hostService: Server;
let hostPort = 0;
const children: ResultPromise[] = [];

/** Connects from inside `netns` with a short timeout; true when the TCP handshake completed. */
async function tcpFrom(netns: string, ip: string, port: number): Promise<boolean> {
  const r = await execa('ip', ['netns', 'exec', netns, 'timeout', '2', 'bash', '-c', `exec 3<>/dev/tcp/${ip}/${port}`], { reject: false });
  return r.exitCode === 0;
}

/**
 * For connections that must succeed: a saturated machine can stretch one probe past its
 * 2 s timeout (process start-up included), so a few attempts; a refusal stays a refusal.
 */
async function tcpFromEventually(netns: string, ip: string, port: number): Promise<boolean> {
  for (let i = 0; i < 5; i++) if (await tcpFrom(netns, ip, port)) return true;
  return false;
}

async function pingFrom(netns: string, ip: string): Promise<boolean> {
  const script = `use Net::Ping; my $p = Net::Ping->new("icmp", 1); exit($p->ping("${ip}") ? 0 : 1);`;
  const r = await execa('ip', ['netns', 'exec', netns, 'perl', '-e', script], { reject: false });
  return r.exitCode === 0;
}

function hostAddress(): string {
  for (const list of Object.values(networkInterfaces())) {
    for (const i of list ?? []) if (i.family === 'IPv4' && !i.internal && !i.address.startsWith('10.2')) return i.address;
  }
  throw new Error('no non-loopback IPv4 address on this host');
}

beforeAll(async () => {
  hostService = createServer((s) => {
    s.on('error', () => undefined); // probes close without reading
    s.end('host-service-reached\n');
  });
  await new Promise<void>((r) => hostService.listen(0, '0.0.0.0', r));
  hostPort = (hostService.address() as { port: number }).port;
  await agent.start();
  a = await agent.acquire('sbx-a');
  b = await agent.acquire('sbx-b');
});

afterAll(async () => {
  for (const c of children) c.kill('SIGKILL');
  await Promise.allSettled(children);
  await new Promise((r) => hostService?.close(r));
  await agent.stop({ destroy: true }).catch(() => undefined);
  await purgeNetwork(tag);
});

describe('network isolation policy', () => {
  it('a sandbox reaches its own host end (ping)', async () => {
    expect(await pingFrom(a.netns, a.hostIp)).toBe(true);
  });

  it("a sandbox reaches no host service: not via its gateway, another slot's host end, nor a host address", async () => {
    expect(await tcpFrom(a.netns, a.hostIp, hostPort)).toBe(false);
    expect(await tcpFrom(a.netns, b.hostIp, hostPort)).toBe(false);
    expect(await tcpFrom(a.netns, hostAddress(), hostPort)).toBe(false);

    await agent.setPolicy({ ...defaultNetworkPolicy(), allowHostAccess: true });
    try {
      expect(await tcpFromEventually(a.netns, a.hostIp, hostPort)).toBe(true);
      expect(await tcpFromEventually(a.netns, hostAddress(), hostPort)).toBe(true);
    } finally {
      await agent.setPolicy(defaultNetworkPolicy());
    }
    expect(await tcpFrom(a.netns, a.hostIp, hostPort)).toBe(false);
  });

  it('the host connects to a service inside a sandbox; another sandbox cannot', async () => {
    const port = 18080;
    const server = execa('ip', ['netns', 'exec', b.netns, 'socat', `TCP-LISTEN:${port},bind=${b.sandboxIp},reuseaddr,fork`, 'SYSTEM:echo sandbox-reached'], {
      reject: false,
    });
    children.push(server);
    let answer = '';
    for (let i = 0; i < 100 && answer === ''; i++) {
      answer = await new Promise<string>((resolve) => {
        const sock = connect(port, b.sandboxIp);
        let data = '';
        sock.on('data', (d) => (data += d.toString()));
        sock.on('end', () => resolve(data));
        sock.on('error', () => setTimeout(() => resolve(''), 50));
      });
    }
    expect(answer.trim()).toBe('sandbox-reached');
    expect(await tcpFrom(a.netns, b.sandboxIp, port)).toBe(false);
    // Not even with host access allowed: forwarding between slots is always dropped.
    await agent.setPolicy({ ...defaultNetworkPolicy(), allowHostAccess: true });
    try {
      expect(await tcpFrom(a.netns, b.sandboxIp, port)).toBe(false);
    } finally {
      await agent.setPolicy(defaultNetworkPolicy());
    }
    server.kill('SIGKILL');
    await server;
  });
});

describe('the node range never leaves by another link', () => {
  it('the policy refuses host traffic to the range unless it goes out a slot link', async () => {
    const { stdout } = await execa('nft', ['list', 'table', 'inet', `cube_${tag}`]);
    const output = stdout.slice(stdout.indexOf('chain output'));
    expect(output).toMatch(new RegExp(`ip daddr ${cidr.replace(/\./g, '\\.')} oifname != "cube${tag}\\*" counter packets \\d+ bytes \\d+ reject`));
    // Through a slot link the range is still reached (the daemon proxies into sandboxes this way).
    const inside = execa(
      'ip',
      [
        'netns',
        'exec',
        a.netns,
        'bash',
        '-c',
        "exec python3 -c \"import socket; s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(('0.0.0.0', 8123)); s.listen(); c,_=s.accept(); c.sendall(b'in-slot\\n')\"",
      ],
      { reject: false },
    );
    children.push(inside);
    let got = '';
    for (let i = 0; i < 50 && !got; i++) {
      got = await new Promise<string>((res) => {
        const c = connect(8123, a.sandboxIp);
        c.once('data', (d) => (res(d.toString()), c.destroy()));
        c.once('error', () => res(''));
      });
      if (!got) await new Promise((r) => setTimeout(r, 200));
    }
    expect(got).toBe('in-slot\n');
  });
});
