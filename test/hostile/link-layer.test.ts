// The link layer (issue 12 item 2): a sandbox cannot make the host learn neighbour entries for
// addresses that are not its own (the neighbour table is host-wide and its hard limit would cut
// every sandbox's network), and root inside has no raw sockets unless the sandbox asks.
import { execa } from 'execa';
import { beforeAll, describe, expect, it } from 'vitest';
import type { SandboxHandle } from '../../src/runtime/types.js';
import { useNetAgent } from './agent.js';
import { run, useRig } from '../runtime/harness.js';

// An ARP request from eth0 claiming `sip`, asking for the host's address `tip`: the host answers
// and, unless filtered, learns `sip` at the sender's MAC on its end of the link.
const FORGE = `
import socket, struct, sys
sip, tip = sys.argv[1], sys.argv[2]
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind(('eth0', 0))
mac = s.getsockname()[4]
arp = struct.pack('!HHBBH', 1, 0x0800, 6, 4, 1) + mac + socket.inet_aton(sip) + b'\\0' * 6 + socket.inet_aton(tip)
s.send(b'\\xff' * 6 + mac + b'\\x08\\x06' + arp)
`;

describe('forged ARP on a slot link', () => {
  const agent = useNetAgent('hostile-arp');

  const neighbours = async (dev: string) => (await execa('ip', ['-4', 'neigh', 'show', 'dev', dev])).stdout;

  it('teaches the host nothing but the slot’s own address', async () => {
    const slot = await agent.acquire('arp-probe');
    try {
      const forged = ['192.0.2.200', slot.sandboxIp.replace(/\.\d+$/, '.250')];
      for (const sip of [...forged, slot.sandboxIp]) {
        // Root of the netns with every capability: the worst a sandbox with NET_RAW could do.
        const r = await execa('ip', ['netns', 'exec', slot.netns, 'python3', '-c', FORGE, sip, slot.hostIp], { reject: false });
        expect(r.exitCode, r.stderr).toBe(0);
      }
      await new Promise((r) => setTimeout(r, 200));
      const table = await neighbours(slot.hostIf);
      for (const sip of forged) expect(table, `host learned ${sip}`).not.toContain(`${sip} `);
      // The probe works: the slot's own address is learned.
      expect(table).toContain(`${slot.sandboxIp} `);
    } finally {
      await agent.release('arp-probe');
    }
  });
});

describe('raw sockets inside a sandbox', () => {
  const rig = useRig('hostile-netraw', { allowNetRaw: true });
  let plain: SandboxHandle;
  let asked: SandboxHandle;
  beforeAll(async () => {
    plain = await rig().driver.create(rig().spec());
    asked = await rig().driver.create(rig().spec({ netRaw: true }));
  });

  const probe = `
import socket
for name, fam, typ in (('raw', socket.AF_INET, socket.SOCK_RAW), ('packet', socket.AF_PACKET, socket.SOCK_RAW)):
    try:
        socket.socket(fam, typ, 1 if fam == socket.AF_INET else 0).close(); print(name, 'ok')
    except OSError as e:
        print(name, e.errno)
`;

  it('root has no CAP_NET_RAW unless the sandbox asked for it', async () => {
    const r = await run(rig(), plain, ['python3', '-c', probe], { user: 'root' });
    expect(r.stdout).toBe('raw 1\npacket 97\n'); // EPERM; EAFNOSUPPORT from the filter (test/hostile/syscalls.test.ts)
    const caps = await run(rig(), plain, ['grep', 'CapBnd', '/proc/self/status'], { user: 'root' });
    expect(BigInt('0x' + /CapBnd:\s+([0-9a-f]+)/.exec(caps.stdout)![1]) & (1n << 13n)).toBe(0n);
    const ok = await run(rig(), asked, ['python3', '-c', probe], { user: 'root' });
    expect(ok.stdout).toBe('raw ok\npacket ok\n');
    const user = await run(rig(), asked, ['python3', '-c', probe]);
    expect(user.stdout).toBe('raw 1\npacket 1\n');
  });
});
