// Disk limits that hold: a sandbox's writable layer is a btrfs subvolume limited to its diskGiB
// (the store is a loop image under the rig's data dir, removed at teardown).
import { readdir, readFile, readlink, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { newVolumeID } from '../../src/ids.js';
import type { SandboxHandle } from '../../src/runtime/types.js';
import { run, useRig } from './harness.js';

const MIB = 1024 ** 2;
const GIB = 1024 * MIB;
const EDQUOT = 122;
const ENOSPC = 28;

describe('ns driver disk limits', () => {
  const rig = useRig('disk');

  it('stops a writer at its disk limit inside the sandbox; the host file grows by no more', { timeout: 120_000 }, async () => {
    const image = join(rig().dataDir, 'store.img');
    const before = (await stat(image)).blocks * 512;
    const h = await rig().driver.create(rig().spec({ diskGiB: 32 / 1024 }));
    const r = await run(rig(), h, ['dd', 'if=/dev/zero', 'of=/var/big', 'bs=1M', 'count=200', 'conv=fsync'], { user: 'root' });
    expect(r.exitCode).not.toBe(0);
    expect(r.stderr).toMatch(/Disk quota exceeded|No space left on device/);
    const written = Number((await run(rig(), h, ['stat', '-c', '%s', '/var/big'], { user: 'root' })).stdout.trim());
    expect(written).toBeGreaterThan(8 * MIB); // it wrote, then hit the wall
    expect(written).toBeLessThanOrEqual(32 * MIB);
    const used = (await rig().driver.storage.diskUsed([h.sandboxID])).get(h.sandboxID)!;
    expect(used).toBeGreaterThan(8 * MIB);
    expect(used).toBeLessThanOrEqual(33 * MIB);
    // The host gives the sparse image blocks only for what was written (plus btrfs metadata).
    expect((await stat(image)).blocks * 512 - before).toBeLessThan(120 * MIB);
    // The sandbox is still usable after the wall: freeing space lets it write again.
    expect((await run(rig(), h, ['sh', '-c', 'rm /var/big && echo ok > /var/small && cat /var/small'], { user: 'root' })).stdout).toBe('ok\n');
    await rig().driver.destroy(h.sandboxID);
  });

  it('stops a file flood (mkdir loop) at the same wall', { timeout: 180_000 }, async () => {
    const h = await rig().driver.create(rig().spec({ diskGiB: 8 / 1024 }));
    const flood = [
      'import os',
      'i = 0',
      'try:',
      '    while True:',
      "        os.mkdir('/var/d%d' % i)",
      '        i += 1',
      'except OSError as e:',
      '    print(i, e.errno)',
    ].join('\n');
    const r = await run(rig(), h, ['python3', '-c', flood], { user: 'root' });
    const [made, errno] = r.stdout.trim().split(' ').map(Number);
    expect([EDQUOT, ENOSPC]).toContain(errno);
    expect(made).toBeGreaterThan(1000); // directories are metadata only: the limit counts it
    expect((await rig().driver.storage.diskUsed([h.sandboxID])).get(h.sandboxID)).toBeLessThanOrEqual(9 * MIB);
    await rig().driver.destroy(h.sandboxID);
  });

  it('removes a sandbox holding many files with a subvolume delete', { timeout: 180_000 }, async () => {
    const h = await rig().driver.create(rig().spec({ diskGiB: 1 }));
    const many =
      "import os\nfor i in range(200):\n    d = '/var/many/%d' % i\n    os.makedirs(d)\n    for j in range(100):\n        open('%s/%d' % (d, j), 'w').close()\nprint('done')";
    expect((await run(rig(), h, ['python3', '-c', many], { user: 'root' })).stdout).toBe('done\n');
    const layer = rig().driver.storage.dir(h.sandboxID);
    expect((await stat(layer)).ino).toBe(256); // a subvolume root
    await rig().driver.destroy(h.sandboxID);
    await expect(stat(layer)).rejects.toMatchObject({ code: 'ENOENT' });
    await expect(stat(join(rig().dataDir, 'sandboxes', h.sandboxID))).rejects.toMatchObject({ code: 'ENOENT' });
    expect(await rig().driver.storage.list()).toEqual([]);
  });

  describe('statfs inside a sandbox', () => {
    /** seccomp listeners open in this process's `cube-launch serve`. */
    const heldListeners = async () => {
      for (const pid of await readdir('/proc')) {
        const m = /^\d+ \(cube-launch\) \S+ (\d+)/.exec(await readFile(`/proc/${pid}/stat`, 'utf8').catch(() => ''));
        if (!m || Number(m[1]) !== process.pid) continue;
        const fds = await readdir(`/proc/${pid}/fd`);
        const links = await Promise.all(fds.map((fd) => readlink(`/proc/${pid}/fd/${fd}`).catch(() => '')));
        return links.filter((l) => l === 'anon_inode:seccomp notify').length;
      }
      throw new Error('no cube-launch serve under this process');
    };
    const df = async (h: SandboxHandle, path: string) => {
      const r = await run(rig(), h, ['df', '-B1', '--output=size,used,avail', path], { user: 'root' });
      expect(r.stderr).toBe('');
      const [size, used, avail] = r.stdout.trim().split('\n')[1]!.trim().split(/\s+/).map(Number);
      return { size: size!, used: used!, avail: avail! };
    };

    it('reports the disk size and use of the root and of a volume, other mounts as before', { timeout: 180_000 }, async () => {
      const volumeID = newVolumeID();
      await rig().driver.volumes.create(volumeID, 64 * MIB);
      try {
        const h = await rig().driver.create(rig().spec({ diskGiB: 1, volumes: [{ volumeID, path: '/data' }] }));
        try {
          const before = await df(h, '/');
          expect(before.size).toBeGreaterThan(0.95 * GIB);
          expect(before.size).toBeLessThanOrEqual(GIB);
          const write = ['sh', '-c', 'dd if=/dev/urandom of=/var/big bs=1M count=100 status=none && sync'];
          expect((await run(rig(), h, write, { user: 'root' })).exitCode).toBe(0);
          const after = await df(h, '/var');
          expect(after.used - before.used).toBeGreaterThan(95 * MIB);
          expect(after.avail).toBeLessThan(before.avail - 95 * MIB);
          // python's os.statvfs (statfs relative to the working directory) agrees with df.
          const py = "import os; s = os.statvfs('.'); print(s.f_blocks * s.f_frsize, (s.f_blocks - s.f_bfree) * s.f_frsize)";
          const [size, used] = (await run(rig(), h, ['python3', '-c', py], { user: 'root', cwd: '/var' })).stdout.trim().split(' ').map(Number);
          expect(size).toBe(after.size);
          expect(Math.abs(used! - after.used)).toBeLessThan(MIB);
          const vol = await df(h, '/data');
          expect(vol.size).toBeGreaterThan(60 * MIB);
          expect(vol.size).toBeLessThanOrEqual(64 * MIB);
          // fstatfs too: an open directory of the volume.
          const fpy = "import os; fd = os.open('/data', os.O_RDONLY); s = os.fstatvfs(fd); print(s.f_blocks * s.f_frsize)";
          expect(Number((await run(rig(), h, ['python3', '-c', fpy], { user: 'root' })).stdout)).toBe(vol.size);
          // /proc, /dev and /tmp (tmpfs) keep their own numbers: the same as statfs of the host's kind.
          const tmp = await df(h, '/tmp');
          expect(tmp.size).toBe(128 * MIB); // the sandbox's memory size
          expect((await df(h, '/dev')).size).toBeLessThan(GIB);
          const proc = await run(rig(), h, ['stat', '-f', '-c', '%T %b', '/proc'], { user: 'root' });
          expect(proc.stdout).toBe('proc 0\n');
          // A bad buffer gets EFAULT, a missing path ENOENT, as from the kernel.
          const bad =
            'import ctypes, os; libc = ctypes.CDLL(None, use_errno=True); r = libc.statfs(b"/", ctypes.c_void_p(8)); print(r, ctypes.get_errno()); print(libc.statfs(b"/nowhere", ctypes.create_string_buffer(120)), ctypes.get_errno())';
          expect((await run(rig(), h, ['python3', '-c', bad], { user: 'root' })).stdout).toBe('-1 14\n-1 2\n');
        } finally {
          await rig().driver.destroy(h.sandboxID);
        }
      } finally {
        await rig().driver.volumes.remove(volumeID);
      }
    });

    it('answers a neighbour while one sandbox storms statfs; storming processes killed mid-call leave the helper serving', { timeout: 180_000 }, async () => {
      const a = await rig().driver.create(rig().spec());
      let b: SandboxHandle | undefined;
      try {
        // Three processes calling statfs in a loop for 4 s (each prints its count), and one more
        // SIGKILLed after 2 s, likely mid-call.
        const loop = "import os, time\nt = time.time() + 4\nn = 0\nwhile time.time() < t:\n    os.statvfs('/'); n += 1\nprint(n)";
        const script = `for i in 1 2 3; do python3 -c "${loop}" & done; timeout -s KILL 2 python3 -c "${loop}"; wait`;
        const storm = run(rig(), a, ['sh', '-c', script], { user: 'root' });
        await new Promise((r) => setTimeout(r, 500));
        b = await rig().driver.create(rig().spec({ diskGiB: 2 / 1024 }));
        expect((await df(b, '/')).size).toBe(2 * MIB);
        const counts = (await storm).stdout.trim().split('\n').map(Number);
        expect(counts).toHaveLength(3);
        for (const n of counts) expect(n).toBeGreaterThan(100);
        expect((await df(a, '/')).size).toBe(GIB);
      } finally {
        if (b) await rig().driver.destroy(b.sandboxID);
        await rig().driver.destroy(a.sandboxID);
      }
    });

    it('answers a process that outlives the command that started it', { timeout: 60_000 }, async () => {
      const h = await rig().driver.create(rig().spec());
      try {
        const late = 'sleep 1; df -B1 --output=size / | tail -1 > /var/late';
        expect((await run(rig(), h, ['sh', '-c', `(${late}) > /dev/null 2>&1 &`], { user: 'root' })).exitCode).toBe(0);
        let out = '';
        for (let i = 0; i < 100 && !out; i++) {
          await new Promise((r) => setTimeout(r, 100));
          out = (await run(rig(), h, ['cat', '/var/late'], { user: 'root' })).stdout.trim();
        }
        expect(Number(out)).toBe(GIB);
        // Its listener goes once no process is left under its filter: none stays in the helper.
        let held = await heldListeners();
        for (let i = 0; i < 50 && held; i++) {
          await new Promise((r) => setTimeout(r, 100));
          held = await heldListeners();
        }
        expect(held).toBe(0);
      } finally {
        await rig().driver.destroy(h.sandboxID);
      }
    });
  });
});
