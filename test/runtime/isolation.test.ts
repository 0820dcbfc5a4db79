import { readFileSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { execa } from 'execa';
import { beforeAll, describe, expect, it } from 'vitest';
import type { SandboxHandle } from '../../src/runtime/types.js';
import { run, useRig } from './harness.js';

describe('ns driver isolation', () => {
  const rig = useRig('isolation');
  let h: SandboxHandle;
  beforeAll(async () => {
    h = await rig().driver.create(rig().spec());
  });

  it('runs under its own pid 1 (cube-init) with the sandbox id as hostname', async () => {
    const r = await run(rig(), h, ['sh', '-c', 'cat /proc/1/comm; tr "\\0" " " < /proc/1/cmdline; echo; hostname']);
    expect(r.exitCode).toBe(0);
    expect(
      r.stdout
        .split('\n')
        .slice(0, 3)
        .map((l) => l.trim()),
    ).toEqual(['cube-init', 'cube-init', h.sandboxID]);
    expect(rig().driver.alive(h)).toBe(true);
  });

  it('sees none of the host processes', async () => {
    const r = await run(rig(), h, ['ps', '-eo', 'pid,comm', '--no-headers']);
    const comms = r.stdout
      .trim()
      .split('\n')
      .map((l) => l.trim().split(/\s+/)[1]);
    expect(comms).toContain('cube-init');
    expect(comms).not.toContain('node');
    expect(comms.length).toBeLessThanOrEqual(2); // cube-init and ps itself
  });

  it('cannot write host files and its writes stay out of the template', async () => {
    const r = await run(rig(), h, ['sh', '-c', 'touch /usr/bin/cube-x; echo rc=$?; echo changed > /etc/hosts; cat /etc/hosts'], { user: 'root' });
    expect(r.stdout).toContain('rc=1');
    expect(r.stderr).toMatch(/Read-only file system/);
    expect(r.stdout).toContain('changed');
    expect(await readFile(join(rig().host.layers[0]!, 'etc/hosts'), 'utf8')).toContain('localhost');
    expect(await readFile(join(rig().driver.storage.dir(h.sandboxID), 'upper/etc/hosts'), 'utf8')).toBe('changed\n');
  });

  it('has its own /etc/shadow and none of the host /root, /home, /var or data dir', async () => {
    const r = await run(
      rig(),
      h,
      [
        'sh',
        '-c',
        `cat /etc/shadow; echo ---; ls -A /root /home; echo ---; test -e /var/lib/dpkg && echo dpkg; test -e ${rig().dataDir} && echo datadir; echo end`,
      ],
      { user: 'root' },
    );
    const [shadow, listing, probes] = r.stdout.split('---\n');
    expect(shadow).not.toBe(readFileSync('/etc/shadow', 'utf8'));
    expect(shadow).toMatch(/^root:\*:/);
    expect(listing).toBe('/home:\nuser\n\n/root:\n');
    expect(probes).toBe('end\n');
  });

  it('keeps root away from mounts, device nodes and kernel settings', async () => {
    const r = await run(
      rig(),
      h,
      [
        'sh',
        '-c',
        'mount -t tmpfs x /mnt; echo m=$?; mknod /tmp/sda b 8 0; echo n=$?; echo x > /proc/sys/kernel/core_pattern; echo s=$?; grep CapBnd /proc/self/status',
      ],
      { user: 'root' },
    );
    expect(r.stdout).toContain('m=32'); // mount(8): permission denied
    expect(r.stdout).toContain('n=1');
    expect(r.stdout).toMatch(/s=[12]\n/); // sh: read-only file system
    const capBnd = BigInt('0x' + /CapBnd:\s+([0-9a-f]+)/.exec(r.stdout)![1]);
    expect(capBnd & (1n << 21n)).toBe(0n); // CAP_SYS_ADMIN
  });

  it('refuses new namespaces, the keyring, BPF, perf events and io_uring to root and users alike (seccomp)', async () => {
    // Each probe prints its errno (0 = the call went through). unshare(CLONE_NEWUSER) needs no
    // capability, so without the filter it would succeed and hand out a full set inside it.
    const probe = `
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
def call(name, nr, *args):
    r = libc.syscall(nr, *[ctypes.c_long(a) for a in args])
    print(name, 0 if r >= 0 else ctypes.get_errno())
call('unshare-user', 272, 0x10000000)
call('unshare-net', 272, 0x40000000)
call('clone-newuser', 56, 0x10000000 | 17, 0, 0, 0, 0)
call('keyctl', 250, 0, 0)
call('bpf', 321, 0, 0, 0)
call('perf', 298, 0, 0, -1, -1, 0)
call('io_uring', 425, 1, 0)
call('clone3', 435, 0, 0)
call('x32-getpid', 0x40000000 + 39)
pid = os.fork()
if pid == 0:
    os._exit(7)
print('fork', os.waitpid(pid, 0)[1] >> 8)
`;
    for (const user of ['root', 'user'] as const) {
      const r = await run(rig(), h, ['python3', '-c', probe], { user });
      expect(r.stderr).toBe('');
      const errno = Object.fromEntries(
        r.stdout
          .trim()
          .split('\n')
          .map((l) => l.split(' ') as [string, string]),
      );
      expect(errno).toEqual({
        'unshare-user': '1', // EPERM
        'unshare-net': '1',
        'clone-newuser': '1',
        keyctl: '1',
        bpf: '1',
        perf: '1',
        io_uring: '38', // ENOSYS: callers fall back
        clone3: '38',
        'x32-getpid': '38',
        fork: '7', // plain clone still works
      });
    }
    const tools = await run(rig(), h, ['sh', '-c', 'unshare -U true; echo u=$?; grep Seccomp: /proc/self/status'], { user: 'user' });
    expect(tools.stdout).toMatch(/u=1\nSeccomp:\s+2\n/);
  });

  it('has a fresh network namespace with only lo (up) when no netns is given, and resolves its hostname', async () => {
    const fresh = await rig().driver.create(rig().spec());
    const r = await run(rig(), fresh, ['sh', '-c', 'ip -o link; getent hosts $(hostname)']);
    expect(r.stdout).toMatch(/^1: lo: <LOOPBACK,UP,LOWER_UP>/);
    expect(r.stdout.split('\n').filter((l) => /^\d+: /.test(l))).toHaveLength(1);
    expect(r.stdout).toMatch(new RegExp(`^127\\.0\\.1\\.1\\s+${fresh.sandboxID}$`, 'm'));
    await rig().driver.destroy(fresh.sandboxID);
  });

  it('joins the network namespace it is given', async () => {
    const name = `cube-${rig().tag}-t0`;
    await execa('ip', ['netns', 'add', name]);
    try {
      await execa('ip', ['-n', name, 'link', 'add', 'cubevt0', 'type', 'veth', 'peer', 'name', 'cubevt1']);
      const n = await rig().driver.create(rig().spec({ netnsPath: `/run/netns/${name}` }));
      const r = await run(rig(), n, ['ip', '-o', 'link']);
      expect(r.stdout).toContain('cubevt0');
      await rig().driver.destroy(n.sandboxID);
    } finally {
      await execa('ip', ['netns', 'del', name]);
    }
  });
});
