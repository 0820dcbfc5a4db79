// Disk limits that hold: a sandbox's writable layer is a btrfs subvolume limited to its diskGiB
// (the store is a loop image under the rig's data dir, removed at teardown).
import { stat } from 'node:fs/promises';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { run, useRig } from './harness.js';

const MIB = 1024 ** 2;
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
});
