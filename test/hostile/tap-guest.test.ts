// A microVM slot against its guest (issue 29 item 3): root in a guest writes any frame to its TAP,
// and the slot netns's neighbour and conntrack tables count in the host's (gc_thresh3,
// nf_conntrack_max are host-wide). No VM here: a process in the slot's netns attaches to the TAP as
// QEMU does and writes the guest's frames.
import { execa } from 'execa';
import { describe, expect, it } from 'vitest';
import { GATEWAY_IP, GUEST_IP, TAP_NAME, TAP_NAT_TABLE } from '../../src/network/tap.js';
import type { NetSlot } from '../../src/network/types.js';
import { useNetAgent } from './agent.js';

// The guest's end of the TAP, each action an argument: `arp,SIP,...` (requests for the gateway
// claiming each SIP), `udp,SRC,DST,N` (N datagrams from SRC to DST, each to its own port: N new
// flows), `ns,SRC,TARGET` (an IPv6 neighbour solicitation for TARGET from SRC, with the source
// link-layer option that makes the receiver learn SRC). It then says `sent` and stays attached
// until its stdin closes: a TAP that loses its last process loses its carrier, and the kernel
// then flushes the device's neighbours (which would hide what was learned).
const GUEST = `
import fcntl, os, socket, struct, sys
fd = os.open('/dev/net/tun', os.O_RDWR)
fcntl.ioctl(fd, 0x400454ca, struct.pack('16sH', sys.argv[1].encode(), 0x0002 | 0x1000))
mac, tapmac = bytes.fromhex('02000a00020f'), bytes.fromhex(sys.argv[2].replace(':', ''))
ip = lambda a: socket.inet_aton(a)
def csum(b):
    if len(b) % 2: b += b'\\0'
    t = sum(struct.unpack('!%dH' % (len(b) // 2), b))
    while t >> 16: t = (t & 0xffff) + (t >> 16)
    return ~t & 0xffff
def act(mode, *args):
  if mode == 'arp':
      for sip in args:
          arp = struct.pack('!HHBBH', 1, 0x0800, 6, 4, 1) + mac + ip(sip) + b'\\0' * 6 + ip('${GATEWAY_IP}')
          os.write(fd, b'\\xff' * 6 + mac + b'\\x08\\x06' + arp)
  elif mode == 'udp':
      src, dst, n = args[0], args[1], int(args[2])
      for i in range(n):
          udp = struct.pack('!HHHH', 40000, 1024 + i, 8, 0)
          h = struct.pack('!BBHHHBBH4s4s', 0x45, 0, 28, i & 0xffff, 0, 64, 17, 0, ip(src), ip(dst))
          h = h[:10] + struct.pack('!H', csum(h)) + h[12:]
          os.write(fd, tapmac + mac + b'\\x08\\x00' + h + udp)
  elif mode == 'ns':
      src, target = socket.inet_pton(socket.AF_INET6, args[0]), socket.inet_pton(socket.AF_INET6, args[1])
      dst = bytes.fromhex('ff0200000000000000000001ff') + target[13:]
      icmp = struct.pack('!BBHI', 135, 0, 0, 0) + target + struct.pack('!BB', 1, 1) + mac
      icmp = icmp[:2] + struct.pack('!H', csum(src + dst + struct.pack('!I3xB', len(icmp), 58) + icmp)) + icmp[4:]
      os.write(fd, b'\\x33\\x33' + dst[12:] + mac + b'\\x86\\xdd' + struct.pack('!IHBB', 6 << 28, len(icmp), 58, 255) + src + dst + icmp)
for a in sys.argv[3:]: act(*a.split(','))
print('sent', flush=True)
sys.stdin.read()
`;

const LIMITS = { maxConnections: 40, newPerSec: 100 };

describe('a guest forging frames on its TAP', () => {
  const agent = useNetAgent('hostile-tap', { connLimits: LIMITS });

  const inSlot = (s: NetSlot, cmd: string, args: string[]) => execa('ip', ['netns', 'exec', s.netns, cmd, ...args]);
  /** Runs the guest's actions; `check` runs while it is still attached. */
  const guest = async (s: NetSlot, actions: string[], check: () => Promise<void>) => {
    const tapMac = JSON.parse((await execa('ip', ['-n', s.netns, '-j', 'link', 'show', 'dev', TAP_NAME])).stdout)[0].address as string;
    const p = execa('ip', ['netns', 'exec', s.netns, 'python3', '-c', GUEST, TAP_NAME, tapMac, ...actions], { stdin: 'pipe', reject: false });
    try {
      await new Promise<void>((resolve, reject) => {
        p.stdout!.on('data', (d: Buffer) => d.toString().includes('sent') && resolve());
        p.once('exit', () => reject(new Error('the guest process exited before sending')));
      });
      await new Promise((r) => setTimeout(r, 200));
      await check();
    } finally {
      p.stdin!.end();
      const r = await p;
      expect(r.exitCode, r.stderr).toBe(0);
    }
  };
  const neighbours = async (s: NetSlot, family: '-4' | '-6') => (await execa('ip', ['-n', s.netns, family, 'neigh', 'show', 'dev', TAP_NAME])).stdout;
  const conntrackCount = async (s: NetSlot) => Number((await inSlot(s, 'cat', ['/proc/sys/net/netfilter/nf_conntrack_count'])).stdout);

  it('teaches the slot no neighbour but the guest’s own address, over ARP or IPv6', async () => {
    const s = await agent.acquire('tap-nd', 'tap');
    try {
      const forged = ['10.0.2.77', '10.0.2.78', '192.0.2.200'];
      // The TAP's own link-local address if it has one (it had before the fix), else the one its MAC gives.
      const ll = /inet6 (fe80::[0-9a-f:]+)\//.exec((await execa('ip', ['-n', s.netns, '-6', '-o', 'addr', 'show', 'dev', TAP_NAME])).stdout)?.[1] ?? 'fe80::1';
      const forged6 = ['fe80::dead:1', 'fe80::dead:2', 'fe80::dead:3'];
      await guest(s, [`arp,${[...forged, GUEST_IP].join(',')}`, ...forged6.map((src) => `ns,${src},${ll}`)], async () => {
        const v4 = await neighbours(s, '-4');
        for (const a of forged) expect(v4, `the slot learned ${a}`).not.toContain(`${a} `);
        // The probe works: the guest's own address is learned.
        expect(v4).toContain(`${GUEST_IP} `);
        const v6 = await neighbours(s, '-6');
        for (const a of forged6) expect(v6, `the slot learned ${a}`).not.toContain(`${a} `);
      });
      // The solicitations reached the slot and were discarded there (IPv6 is off on the TAP), not lost on the way.
      const snmp6 = (await inSlot(s, 'cat', [`/proc/net/dev_snmp6/${TAP_NAME}`])).stdout;
      expect(Number(/Ip6InDiscards\s+(\d+)/.exec(snmp6)?.[1] ?? 0)).toBeGreaterThanOrEqual(forged6.length);
    } finally {
      await agent.release('tap-nd');
    }
  });

  it('holds the guest’s connections to the node’s per-sandbox caps and drops what it sends from addresses not its own', async () => {
    const s = await agent.acquire('tap-ct', 'tap');
    try {
      const before = await conntrackCount(s);
      // 300 new flows at once through the slot (to the host's end of its link), then 200 from forged sources.
      await guest(s, [`udp,${GUEST_IP},${s.hostIp},300`, `udp,10.0.2.99,${s.hostIp},100`, `udp,198.51.100.7,${s.hostIp},100`], async () => undefined);
      const made = (await conntrackCount(s)) - before;
      expect(made).toBeGreaterThan(0);
      expect(made).toBeLessThanOrEqual(LIMITS.maxConnections);
      const rules = (await inSlot(s, 'nft', ['list', 'chain', 'ip', TAP_NAT_TABLE, 'guard'])).stdout;
      const spoofDrops = Number(/saddr != \S+ counter packets (\d+)/.exec(rules)?.[1] ?? 0);
      expect(spoofDrops).toBe(200);
    } finally {
      await agent.release('tap-ct');
    }
  });
});
