// Identity (issue 12 item 1): each sandbox of the ns runtime has host ids of its own, a user
// namespace mapping ids 0-65535 inside onto its range (src/runtime/ns/ids.ts). `user` is no other
// sandbox's uid and no host account's (this host has uid 1000: cloudsdk), root inside is not host
// root, so per-uid kernel limits are the sandbox's alone and a host account with the old uid 1000
// can neither signal nor read a sandbox's processes. Ids inside stay 0 and 1000.
import { readFileSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execa } from 'execa';
import { beforeAll, describe, expect, it } from 'vitest';
import { CubeError } from '../../src/errors.js';
import { NsDriver } from '../../src/runtime/ns/driver.js';
import { HostIdRanges, hostIdSpans, ID_RANGE } from '../../src/runtime/ns/ids.js';
import type { SandboxHandle } from '../../src/runtime/types.js';
import { run, useRig, type Rig } from '../runtime/harness.js';

/** Host uid, gid (real) of a host pid, from its status. */
function hostIds(pid: number): { uid: number; gid: number } {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  return { uid: Number(/^Uid:\s+(\d+)/m.exec(status)![1]), gid: Number(/^Gid:\s+(\d+)/m.exec(status)![1]) };
}

/** Starts `argv` as `user` in `h` and returns the host pid of the process whose comm is `comm`, once it runs. */
async function started(rig: Rig, h: SandboxHandle, argv: string[], comm: string, user: 'user' | 'root' = 'user') {
  const job = rig.driver.exec(h, { argv, user });
  for (;;) {
    for (const pid of await rig.cgroups.pids(h.sandboxID)) {
      try {
        if (readFileSync(`/proc/${pid}/comm`, 'utf8') === `${comm}\n`) return { pid, job };
      } catch {
        // exited meanwhile
      }
    }
    await new Promise((r) => setTimeout(r, 20));
  }
}

// Distinct from the default base, so sandboxes of other test files never share these ranges.
const IDENTITY = { userns: true, hostIdBase: 50_000_000, hostIdRanges: 64 };

describe('each sandbox has host ids of its own', () => {
  const rig = useRig('hostile-identity', { identity: IDENTITY });
  let a: SandboxHandle;
  let b: SandboxHandle;
  beforeAll(async () => {
    [a, b] = await Promise.all([rig().driver.create(rig().spec()), rig().driver.create(rig().spec())]);
  });

  it('root inside is a host id of its range, never host root, and the two ranges differ', () => {
    const [ra, rb] = [hostIds(a.initPid), hostIds(b.initPid)];
    for (const r of [ra, rb]) {
      expect(r.uid).toBeGreaterThanOrEqual(IDENTITY.hostIdBase);
      expect(r.gid).toBe(r.uid);
    }
    expect(Math.abs(ra.uid - rb.uid)).toBeGreaterThanOrEqual(ID_RANGE);
  });

  it('`user` of two sandboxes are two host uids, neither 1000; inside they are 1000 and 0 as before', async () => {
    const ua = await started(rig(), a, ['sleep', '60'], 'sleep');
    const ub = await started(rig(), b, ['sleep', '60'], 'sleep');
    try {
      expect(hostIds(ua.pid).uid).toBe(hostIds(a.initPid).uid + 1000);
      expect(hostIds(ub.pid).uid).toBe(hostIds(b.initPid).uid + 1000);
      expect(hostIds(ua.pid).uid).not.toBe(hostIds(ub.pid).uid);
    } finally {
      ua.job.kill();
      ub.job.kill();
    }
    expect((await run(rig(), a, ['sh', '-c', 'id -u; id -g; whoami; stat -c %u:%g /home/user'])).stdout).toBe('1000\n1000\nuser\n1000:1000\n');
    expect((await run(rig(), a, ['sh', '-c', 'id -u; whoami; stat -c %u:%g /tmp /etc/passwd'], { user: 'root' })).stdout).toBe('0\nroot\n0:0\n0:0\n');
  });

  it('files the files API writes belong to the asked user inside and keep ids 0/1000 on disk', async () => {
    const st = await rig().driver.files.write(a, '/home/user/deep/new.txt', Buffer.from('hi'));
    expect([st.uid, st.gid]).toEqual([1000, 1000]);
    const byRoot = await rig().driver.files.write(a, '/opt/byroot.txt', Buffer.from('r'), 'root');
    expect([byRoot.uid, byRoot.gid]).toEqual([0, 0]);
    expect((await run(rig(), a, ['stat', '-c', '%u:%g %n', '/home/user/deep', '/home/user/deep/new.txt', '/opt/byroot.txt'])).stdout).toBe(
      '1000:1000 /home/user/deep\n1000:1000 /home/user/deep/new.txt\n0:0 /opt/byroot.txt\n',
    );
    const upper = rig().driver.storage.upperDir(a.sandboxID);
    const { stdout } = await execa('stat', ['-c', '%u:%g', `${upper}/home/user/deep/new.txt`, `${upper}/opt/byroot.txt`]);
    expect(stdout).toBe('1000:1000\n0:0');
  });

  it('inotify instances exhausted by one sandbox still open in the other', { timeout: 60_000 }, async () => {
    const max = Number(readFileSync('/proc/sys/fs/inotify/max_user_instances', 'utf8'));
    const hog = rig().driver.exec(a, {
      argv: ['python3', '-c', 'import ctypes,time\nlibc=ctypes.CDLL(None)\nn=0\nwhile libc.inotify_init1(0)>=0: n+=1\nprint(n,flush=True)\ntime.sleep(60)'],
    });
    try {
      const held = await new Promise<number>((resolve) => hog.stdout.once('data', (b: Buffer) => resolve(Number(b.toString()))));
      expect(held).toBeLessThanOrEqual(max);
      const probe = ['python3', '-c', 'import ctypes\nprint(ctypes.CDLL(None).inotify_init1(0) >= 0)'];
      expect((await run(rig(), a, probe)).stdout).toBe('False\n');
      expect((await run(rig(), b, probe)).stdout).toBe('True\n');
      expect((await run(rig(), b, probe, { user: 'root' })).stdout).toBe('True\n');
    } finally {
      hog.kill();
      await hog.exited;
    }
  });

  it('a host process with the old uid 1000 can neither signal nor read a sandbox process', async () => {
    const u = await started(rig(), a, ['sleep', '60'], 'sleep');
    try {
      const asHost1000 = { uid: 1000, gid: 1000, reject: false } as const;
      const kill = await execa('kill', ['-0', String(u.pid)], asHost1000);
      expect(kill.exitCode).not.toBe(0);
      expect(kill.stderr).toMatch(/not permitted/i);
      const environ = await execa('cat', [`/proc/${u.pid}/environ`], asHost1000);
      expect(environ.exitCode).not.toBe(0);
      expect(environ.stderr).toMatch(/denied/i);
    } finally {
      u.job.kill();
    }
  });
});

describe('host id ranges', () => {
  const ranges = { userns: true, hostIdBase: 60_000_000, hostIdRanges: 2 };
  const rig = useRig('hostile-identity-ranges', { identity: ranges });

  it('are returned on destroy and re-adopted from the running sandboxes after a restart', { timeout: 120_000 }, async () => {
    const exhausted = (p: Promise<unknown>) => expect(p).rejects.toMatchObject({ kind: 'IDS_EXHAUSTED' });
    const a = await rig().driver.create(rig().spec());
    const b = await rig().driver.create(rig().spec());
    await exhausted(rig().driver.create(rig().spec()));
    await rig().driver.destroy(b.sandboxID);
    const c = await rig().driver.create(rig().spec());
    expect(hostIds(c.initPid).uid).not.toBe(hostIds(a.initPid).uid);
    // A daemon killed with -9 keeps no allocator: the next one rebuilds it from what runs.
    const restarted = new NsDriver({ dataDir: rig().dataDir, nodeTag: rig().tag, identity: ranges });
    await restarted.init();
    const found = await restarted.scan();
    expect(found.map((h) => h.sandboxID).sort()).toEqual([a.sandboxID, c.sandboxID].sort());
    await exhausted(restarted.create(rig().spec()));
    await restarted.destroy(c.sandboxID);
    const d = await restarted.create(rig().spec());
    expect(hostIds(d.initPid).uid).not.toBe(hostIds(a.initPid).uid);
    expect((await run({ ...rig(), driver: restarted }, d, ['id', '-u'])).stdout).toBe('1000\n');
  });
});

describe('host id ranges, pure', () => {
  it('read the ids of accounts, groups and subordinate ranges', () => {
    expect(hostIdSpans('/etc/passwd', 'root:x:0:0:root:/root:/bin/bash\n# c\nu:x:1000:1000::/h:/bin/sh\n')).toEqual([
      [0, 0],
      [1000, 1000],
    ]);
    expect(hostIdSpans('/etc/subuid', 'alice:100000:65536\n')).toEqual([[100000, 165535]]);
  });

  it('refuse a configuration that meets a host id, and hand out every range once', async () => {
    const r = new HostIdRanges(1_000_000, 2);
    const dir = await mkdtemp(join(tmpdir(), 'cube-ids-'));
    try {
      await writeFile(join(dir, 'passwd'), 'root:x:0:0::/root:/bin/sh\n');
      await writeFile(join(dir, 'subuid'), 'alice:1100000:65536\n');
      await expect(r.checkHost([join(dir, 'passwd')])).resolves.toBeUndefined();
      await expect(r.checkHost([join(dir, 'passwd'), join(dir, 'subuid')])).rejects.toMatchObject({ kind: 'CONFIG_INVALID' });
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
    expect([r.take(), r.take()].sort()).toEqual([1_000_000, 1_000_000 + ID_RANGE]);
    expect(() => r.take()).toThrow(CubeError);
    r.release(1_000_000);
    expect(r.take()).toBe(1_000_000);
    expect(r.adopt(1_000_001)).toBe(false);
    expect(() => new HostIdRanges(2 ** 32 - ID_RANGE, 2)).toThrow(/between 1 and 2\^32-2/);
  });
});
