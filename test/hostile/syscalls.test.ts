// The syscall surface (issue 12 item 4): the seccomp filter is an allowlist (a syscall it does not
// list gets ENOSYS), sockets are limited to AF_UNIX, AF_INET, AF_INET6 and AF_NETLINK (AF_PACKET
// only in a sandbox that asked for NET_RAW), modify_ldt and odd personalities are refused, and the
// sandbox's pid 1 runs with no capabilities under the same filter.
import { readFileSync } from 'node:fs';
import { beforeAll, describe, expect, it } from 'vitest';
import type { SandboxHandle } from '../../src/runtime/types.js';
import { run, useRig } from '../runtime/harness.js';

// Prints "name errno" per probe (0: the call went through).
const PROBE = `
import ctypes, socket
libc = ctypes.CDLL(None, use_errno=True)
def call(name, nr, *args):
    r = libc.syscall(nr, *[ctypes.c_long(a) for a in args])
    print(name, 0 if r >= 0 else ctypes.get_errno())
for name, fam, typ in (('unix', 1, 1), ('inet', 2, 1), ('inet6', 10, 1), ('netlink', 16, 3),
                       ('packet', 17, 3), ('vsock', 40, 1), ('xdp', 44, 3), ('can', 29, 3), ('alg', 38, 5)):
    try:
        socket.socket(fam, typ, 0).close(); print(name, 0)
    except OSError as e:
        print(name, e.errno)
buf = ctypes.create_string_buffer(16)
call('modify_ldt', 154, 0, ctypes.addressof(buf), 16)
call('personality-query', 135, 0xffffffff)
call('personality-linux32', 135, 0x0008)
call('personality-noaslr', 135, 0x0040000)
call('personality-exec', 135, 0x0400000)
call('sysfs', 139, 3)
call('uselib', 134, 0)
`;

const parse = (out: string) =>
  Object.fromEntries(
    out
      .trim()
      .split('\n')
      .map((l) => l.split(' ') as [string, string]),
  );

describe('the seccomp allowlist', () => {
  const rig = useRig('hostile-syscalls', { allowNetRaw: true });
  let plain: SandboxHandle;
  let raw: SandboxHandle;
  beforeAll(async () => {
    plain = await rig().driver.create(rig().spec());
    raw = await rig().driver.create(rig().spec({ netRaw: true }));
  });

  const expected = (packet: string) => ({
    unix: '0',
    inet: '0',
    inet6: '0',
    netlink: '0',
    packet,
    vsock: '97', // EAFNOSUPPORT: as on a kernel without the family
    xdp: '97',
    can: '97',
    alg: '97',
    modify_ldt: '1', // EPERM
    'personality-query': '0',
    'personality-linux32': '0',
    'personality-noaslr': '1',
    'personality-exec': '1',
    sysfs: '38', // ENOSYS: not on the list
    uselib: '38',
  });

  it('refuses socket families, modify_ldt, personalities and unlisted syscalls to root and user', async () => {
    for (const user of ['root', 'user'] as const) {
      const r = await run(rig(), plain, ['python3', '-c', PROBE], { user });
      expect(r.stderr, user).toBe('');
      expect(parse(r.stdout), user).toEqual(expected('97'));
    }
  });

  it('lets AF_PACKET through only in a sandbox that asked for NET_RAW (and then only to root)', async () => {
    const root = await run(rig(), raw, ['python3', '-c', PROBE], { user: 'root' });
    expect(parse(root.stdout)).toEqual(expected('0'));
    const user = await run(rig(), raw, ['python3', '-c', PROBE]);
    expect(parse(user.stdout)).toEqual(expected('1')); // the filter passes it, the missing capability does not
  });

  // apt and dpkg: the host template has no /var/lib/dpkg; test/e2b/code-interpreter.test.ts runs a Debian template.
  it('keeps compilers, debuggers and runtimes working under the filter', async () => {
    const script = [
      "printf 'int main(){return 7;}' | cc -x c -o /tmp/seven - && /tmp/seven; echo cc=$?",
      'strace -f -qq -e trace=none true && echo strace=0',
      'gdb -batch -ex run -ex bt /bin/true 2>&1 | grep -c "exited normally"',
      'node -e \'require("worker_threads"); require("child_process").execFileSync("true"); console.log("node=0")\'',
      'git init -q /tmp/r && git -C /tmp/r status --short && echo git=0',
    ].join('; ');
    const r = await run(rig(), plain, ['sh', '-c', script], { user: 'root' });
    expect(r.stdout, r.stderr).toBe('cc=7\nstrace=0\n1\nnode=0\ngit=0\n');
  });

  it('keeps everyday programs working under the filter', async () => {
    const r = await run(rig(), plain, [
      'sh',
      '-c',
      'ls / >/dev/null && python3 -c "import threading, subprocess, asyncio; t = threading.Thread(target=print); t.start(); t.join(); print(subprocess.run([\'true\']).returncode)" && getent hosts localhost >/dev/null && echo ok',
    ]);
    expect(r.stderr).toBe('');
    expect(r.stdout).toBe('\n0\nok\n');
  });

  it("runs the sandbox's pid 1 with no capabilities, non-dumpable, under the filter", async () => {
    for (const h of [plain, raw]) {
      const status = readFileSync(`/proc/${h.initPid}/status`, 'utf8');
      expect(status).toMatch(/^CapEff:\s+0+$/m);
      expect(status).toMatch(/^CapPrm:\s+0+$/m);
      expect(status).toMatch(/^Seccomp:\s+2$/m);
      const bnd = BigInt('0x' + /CapBnd:\s+([0-9a-f]+)/.exec(status)![1]);
      expect(bnd & (1n << 21n)).toBe(0n); // CAP_SYS_ADMIN
    }
    // Root inside cannot trace its init (it would run code in a process outside every command's filter).
    const r = await run(
      rig(),
      plain,
      ['python3', '-c', 'import ctypes; l = ctypes.CDLL(None, use_errno=True); print(l.ptrace(16, 1, 0, 0), ctypes.get_errno())'],
      { user: 'root' },
    );
    expect(r.stdout).toBe('-1 1\n');
  });
});
