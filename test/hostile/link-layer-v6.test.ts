// IPv6 neighbour discovery on a slot link (issue 12 item 2): sandboxes have no IPv6 address, but the
// host's end of each link has a link-local one, so root inside with NET_RAW could send neighbour
// solicitations from forged link-local sources and fill the host's IPv6 neighbour table, which is as
// host-wide as the ARP one. Even on a node that lets sandboxes reach the host (allow_host_access), no
// IPv6 from a slot link reaches the host's stack.
import { execa } from 'execa';
import { describe, expect, it } from 'vitest';
import { nftTableName } from '../../src/network/names.js';
import { useNetAgent } from './agent.js';

// A neighbour solicitation for the host's link-local `target`, from the forged source `src`, sent raw
// on eth0 (with the source link-layer option, which is what makes the receiver learn `src`).
const FORGE = `
import socket, struct, sys
src, target = socket.inet_pton(socket.AF_INET6, sys.argv[1]), socket.inet_pton(socket.AF_INET6, sys.argv[2])
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind(('eth0', 0))
mac = s.getsockname()[4]
dst = bytes.fromhex('ff0200000000000000000001ff') + target[13:]
icmp = struct.pack('!BBHI', 135, 0, 0, 0) + target + struct.pack('!BB', 1, 1) + mac
def csum(b):
    if len(b) % 2: b += b'\\0'
    t = sum(struct.unpack('!%dH' % (len(b) // 2), b))
    while t >> 16: t = (t & 0xffff) + (t >> 16)
    return ~t & 0xffff
pseudo = src + dst + struct.pack('!I3xB', len(icmp), 58)
icmp = icmp[:2] + struct.pack('!H', csum(pseudo + icmp)) + icmp[4:]
ip6 = struct.pack('!IHBB', 6 << 28, len(icmp), 58, 255) + src + dst
s.send(b'\\x33\\x33' + dst[12:] + mac + b'\\x86\\xdd' + ip6 + icmp)
`;

describe('forged IPv6 neighbour solicitations on a slot link', () => {
  const agent = useNetAgent('hostile-nd6', { allowHostAccess: true });

  it('teach the host nothing, even with host access allowed', async () => {
    const slot = await agent.acquire('nd6-probe');
    try {
      const addr = (await execa('ip', ['-6', '-o', 'addr', 'show', 'dev', slot.hostIf, 'scope', 'link'])).stdout;
      const hostLL = /inet6 (fe80::[0-9a-f:]+)\//.exec(addr)?.[1];
      expect(hostLL, `no link-local address on ${slot.hostIf}: ${addr}`).toBeTruthy();
      const forged = ['fe80::dead:1', 'fe80::dead:2', 'fe80::dead:3'];
      for (const src of forged) {
        const r = await execa('ip', ['netns', 'exec', slot.netns, 'python3', '-c', FORGE, src, hostLL!], { reject: false });
        expect(r.exitCode, r.stderr).toBe(0);
      }
      await new Promise((r) => setTimeout(r, 200));
      const table = (await execa('ip', ['-6', 'neigh', 'show', 'dev', slot.hostIf])).stdout;
      for (const src of forged) expect(table, `host learned ${src}`).not.toContain(`${src} `);
      // The packets did reach the host, and were dropped by the node's filter, not lost on the way.
      const tag = slot.hostIf.slice(4, 10); // hostIfName: `cube` + the node's 6-character tag + index
      const rules = (await execa('nft', ['list', 'chain', 'inet', nftTableName(tag), 'input'])).stdout;
      const dropped = /meta nfproto ipv6 counter packets (\d+)/.exec(rules);
      expect(Number(dropped?.[1] ?? 0)).toBeGreaterThanOrEqual(forged.length);
    } finally {
      await agent.release('nd6-probe');
    }
  });
});
