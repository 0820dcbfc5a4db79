// Files and reachability (issue 12 item 5): what root inside a sandbox makes on its disk cannot
// raise privileges (nosuid, nodev overlay) and stays behind 0700 directories on the host; the
// host's /proc data is masked; and the host's own LAN and gateway are not reachable through the
// node's forwarding even when their range is not a private one.
import { readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { execa } from 'execa';
import { beforeAll, describe, expect, it } from 'vitest';
import { hostNetworksOf } from '../../src/network/host-scan.js';
import type { SandboxHandle } from '../../src/runtime/types.js';
import { useNetAgent } from './agent.js';
import { run, useRig } from '../runtime/harness.js';

describe('files made inside a sandbox', () => {
  const rig = useRig('hostile-files');
  let h: SandboxHandle;
  beforeAll(async () => {
    h = await rig().driver.create(rig().spec());
  });

  it('a setuid-root binary made by root inside gives a user no root (overlay nosuid, nodev)', async () => {
    const make = await run(rig(), h, ['sh', '-c', 'cp /usr/bin/bash /home/user/rootsh && chmod 4755 /home/user/rootsh && ls -l /home/user/rootsh'], {
      user: 'root',
    });
    expect(make.exitCode).toBe(0);
    expect(make.stdout).toMatch(/^-rwsr-xr-x/);
    // Root drops to uid 1000 without no_new_privs (as a root service inside would), then runs it.
    const r = await run(rig(), h, ['setpriv', '--reuid=1000', '--regid=1000', '--clear-groups', '/home/user/rootsh', '-p', '-c', 'id -u; id -ru'], {
      user: 'root',
    });
    expect(r.stdout).toBe('1000\n1000\n');
    const opts = await run(rig(), h, ['sh', '-c', 'awk \'$5 == "/" {print $6}\' /proc/self/mountinfo']);
    expect(opts.stdout.split(',')).toEqual(expect.arrayContaining(['nosuid', 'nodev']));
  });

  it('keeps sandbox directories 0700 on the host', () => {
    expect(statSync(join(rig().dataDir, 'sandboxes')).mode & 0o777).toBe(0o700);
    expect(statSync(h.dir).mode & 0o777).toBe(0o700);
  });

  it('masks /proc files that show host data to root inside', async () => {
    const hostInfo = ['diskstats', 'interrupts', 'swaps']; // issue 29 item 8
    const files = ['slabinfo', 'kpagecount', 'kpageflags', 'kpagecgroup', 'pagetypeinfo', 'config.gz', 'cmdline', 'vmallocinfo', ...hostInfo].filter((f) => {
      try {
        statSync(`/proc/${f}`);
        return true;
      } catch {
        return false;
      }
    });
    expect(files).toEqual(expect.arrayContaining(['cmdline', 'diskstats', 'interrupts']));
    for (const f of ['cmdline', 'diskstats', 'interrupts']) expect(readFileSync(`/proc/${f}`, 'utf8').length, f).toBeGreaterThan(0);
    const r = await run(rig(), h, ['sh', '-c', files.map((f) => `printf '%s ' ${f}; head -c 4096 /proc/${f} 2>/dev/null | wc -c`).join('; ')], {
      user: 'root',
    });
    const sizes = Object.fromEntries(
      r.stdout
        .trim()
        .split('\n')
        .map((l) => l.trim().split(/\s+/) as [string, string]),
    );
    expect(sizes).toEqual(Object.fromEntries(files.map((f) => [f, '0'])));
  });

  it("shows the sandbox's memory and no host load in /proc/meminfo and /proc/loadavg (issue 29 item 8)", async () => {
    const memoryMiB = rig().spec().memoryMiB;
    const r = await run(rig(), h, ['sh', '-c', 'head -3 /proc/meminfo; cat /proc/loadavg; echo x >> /proc/meminfo; echo rc=$?'], { user: 'root' });
    const kib = `${memoryMiB * 1024} kB`;
    expect(r.stdout).toMatch(new RegExp(`^MemTotal: +${kib}\nMemFree: +${kib}\nMemAvailable: +${kib}\n0\.00 0\.00 0\.00 1/1 1\nrc=[12]\n$`));
    // What a program sizing itself by the machine's memory sees (Node's os.totalmem reads MemTotal; `free` too).
    const node = await run(rig(), h, ['node', '-e', 'console.log(require("os").totalmem())']);
    expect(node.stdout).toBe(`${memoryMiB * 1024 * 1024}\n`);
    const free = await run(rig(), h, ['free', '-m']);
    expect(free.stdout).toMatch(new RegExp(`^Mem: +${memoryMiB} `, 'm'));
  });

  it("shows no host path of its layers in mountinfo (the overlay's lowerdir, upperdir, workdir)", async () => {
    const r = await run(rig(), h, ['sh', '-c', 'cat /proc/self/mountinfo /proc/self/mounts /proc/1/mountinfo'], { user: 'root' });
    const root = r.stdout.split('\n').find((l) => / \/ \/ /.test(l) && l.includes('overlay'));
    expect(root, r.stdout).toBeDefined();
    expect(root).toMatch(/lowerdir=/);
    expect(r.stdout).not.toContain(rig().dataDir);
    for (const l of rig().host.layers) expect(r.stdout).not.toContain(l);
  });
});

describe("the host's own networks", () => {
  it('are read from the routing table: connected subnets and gateways, not loopback or cube links', () => {
    const table = [
      'Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT',
      'eth0\t00000000\t010200C0\t0003\t0\t0\t0\t00000000\t0\t0\t0',
      'eth0\t000200C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0',
      'eth1\t0000A8C0\t00000000\t0001\t0\t0\t0\t0000FFFF\t0\t0\t0',
      'eth1\t00000A0A\t0100A8C0\t0003\t0\t0\t0\t0000FFFF\t0\t0\t0',
      'cubebdbf1\t0400C50A\t00000000\t0001\t0\t0\t0\tFCFFFFFF\t0\t0\t0',
      'lo\t0000007F\t00000000\t0001\t0\t0\t0\t000000FF\t0\t0\t0',
      'eth2\t00001FAC\t00000000\t0000\t0\t0\t0\t0000FFFF\t0\t0\t0',
    ].join('\n');
    expect(hostNetworksOf(table)).toEqual(['192.0.2.0/24', '192.0.2.1', '192.168.0.0/16', '192.168.0.1']);
  });

  describe('against the real kernel', () => {
    const agent = useNetAgent('hostile-lan');

    it("a sandbox's connection to the host's gateway and LAN is dropped before it is forwarded", async () => {
      const targets = hostNetworksOf(readFileSync('/proc/net/route', 'utf8'))
        .filter((n) => !n.includes('/'))
        .concat(
          hostNetworksOf(readFileSync('/proc/net/route', 'utf8'))
            .filter((n) => n.includes('/'))
            .map((n) => n.replace(/\.0\/\d+$/, '.77')),
        );
      expect(targets.length).toBeGreaterThan(0);
      const slot = await agent.acquire('lan-probe');
      try {
        for (const ip of targets) {
          // The forward path confirms a conntrack entry once the SYN leaves; a drop never does.
          await execa('ip', ['netns', 'exec', slot.netns, 'timeout', '1', 'bash', '-c', `exec 3<>/dev/tcp/${ip}/8081`], { reject: false });
          const ct = await execa('conntrack', ['-L', '-s', slot.sandboxIp, '-d', ip], { reject: false });
          expect(ct.stdout, `${ip} was forwarded`).not.toContain(`dst=${ip}`);
        }
      } finally {
        await agent.release('lan-probe');
      }
    });
  });
});
