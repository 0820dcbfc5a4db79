// The btrfs sandbox store on a real loop image under the test's own data dir, removed at the end
// (test/helpers/loop-store.ts: close({ destroy: true }) after the tests, a lazy unmount if one died half-way).
import { readFile, readdir, rm, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { execa } from 'execa';
import { beforeAll, describe, expect, it } from 'vitest';
import { isCubeError } from '../../src/errors.js';
import { BtrfsStore, CLONE_TARGET, POOL_TARGET } from '../../src/storage/btrfs-store.js';
import { STORE_MIN_FREE_BYTES, imageBytes, isFullError, usedPercentOf } from '../../src/storage/sizes.js';
import { loopDevicesOf, mountHolders } from '../../src/storage/loop-devices.js';
import { useLoopStore } from '../helpers/loop-store.js';

const MIB = 1024 ** 2;
const GIB = 1024 ** 3;

describe('store arithmetic', () => {
  it('sizes the image from the config or half the free space', () => {
    expect(imageBytes(4, 100 * GIB)).toBe(4 * GIB);
    expect(imageBytes(0, 100 * GIB)).toBe(50 * GIB);
    expect(imageBytes(0, 1.5 * GIB)).toBe(GIB); // at least 1 GiB
    expect(usedPercentOf({ blocks: 100, bfree: 40, bavail: 30 })).toBe(66.7);
    expect(isFullError('cube-launch: create subvolume /x: No space left on device')).toBe(true);
    expect(isFullError('cube-launch: open /x: Permission denied')).toBe(false);
  });
});

describe('btrfs store on a loop image', () => {
  const loop = useLoopStore('storage');
  let dataDir = '';
  let store: BtrfsStore;
  const reopen = async () => (store = await loop().reopen());
  beforeAll(() => ({ dataDir, store } = loop()));

  it('mounts a sparse image under the data dir and fills its pool', async () => {
    const u = await store.usage();
    expect(u).toMatchObject({ kind: 'loop', path: join(dataDir, 'store'), sizeBytes: GIB });
    expect((await stat(join(dataDir, 'store.img'))).blocks * 512).toBeLessThan(GIB / 4); // sparse
    for (let i = 0; i < 200 && store.pooled < POOL_TARGET; i++) await new Promise((r) => setTimeout(r, 50));
    expect(store.pooled).toBe(POOL_TARGET);
  });

  it('gives each sandbox its own subvolume, counts its bytes, snapshots and deletes it', async () => {
    const dir = await store.take('sb-one');
    expect((await stat(dir)).ino).toBe(256);
    expect((await stat(join(dir, 'upper'))).isDirectory()).toBe(true);
    await writeFile(join(dir, 'upper', 'data'), Buffer.alloc(4 * MIB, 1));
    await execa('sync', ['-f', join(dir, 'upper', 'data')]);
    const used = (await store.diskUsed(['sb-one', 'unknown'])).get('sb-one')!;
    expect(used).toBeGreaterThanOrEqual(4 * MIB);
    expect(used).toBeLessThan(5 * MIB);

    await store.keep('sb-one', 'snap-one');
    await writeFile(join(dir, 'upper', 'later'), 'after the snapshot');
    expect(await store.kept()).toEqual(['snap-one']);
    await expect(writeFile(join(store.snapshotsDir, 'snap-one', 'upper', 'x'), 'x')).rejects.toThrow(/EROFS|read-only/);
    const snap = await store.takeFrom('snap-one', 'sb-two');
    expect((await readFile(join(snap, 'upper', 'data'))).equals(Buffer.alloc(4 * MIB, 1))).toBe(true); // (toEqual on 4 MiB takes minutes)
    expect(await stat(join(snap, 'upper', 'later')).catch((e: NodeJS.ErrnoException) => e.code)).toBe('ENOENT');
    await writeFile(join(snap, 'upper', 'mine'), 'the copy writes');
    // After the first create from it, clones are kept ready: the next creates rename one into place.
    store.refillClones('snap-one');
    for (let i = 0; i < 100 && (await readdir(store.clonesDir)).length < CLONE_TARGET; i++) await new Promise((r) => setTimeout(r, 20));
    expect((await readdir(store.clonesDir)).length).toBe(CLONE_TARGET);
    const again = await store.takeFrom('snap-one', 'sb-again');
    expect((await readFile(join(again, 'upper', 'data'))).length).toBe(4 * MIB);
    expect(await stat(join(again, 'upper', 'mine')).catch((e: NodeJS.ErrnoException) => e.code)).toBe('ENOENT');
    await store.remove('sb-again');
    expect((await store.list()).sort()).toEqual(['sb-one', 'sb-two']);
    // The kept snapshot goes while the sandbox made from it keeps its data.
    await store.drop('snap-one');
    await store.drop('snap-one'); // idempotent
    expect(await store.kept()).toEqual([]);
    for (let i = 0; i < 100 && (await readdir(store.clonesDir)).length > 0; i++) await new Promise((r) => setTimeout(r, 20));
    expect(await readdir(store.clonesDir)).toEqual([]);
    expect((await readFile(join(snap, 'upper', 'data'))).length).toBe(4 * MIB);
    await expect(store.takeFrom('snap-one', 'sb-three')).rejects.toMatchObject({ code: 130404 });
    await store.remove('sb-one');
    await store.remove('sb-one'); // idempotent
    await store.remove('sb-two');
    expect(await store.list()).toEqual([]);
  });

  it('re-uses the mount, its pool and its subvolumes after a restart', async () => {
    await store.create('sb-kept', 64 * MIB);
    await store.close({ destroy: false });
    await reopen();
    expect(await store.list()).toEqual(['sb-kept']);
    expect((await store.diskUsed(['sb-kept'])).has('sb-kept')).toBe(true);
    expect(store.pooled).toBeGreaterThan(0);
    expect((await readFile('/proc/self/mounts', 'utf8')).split('\n').filter((l) => l.split(' ')[1] === join(dataDir, 'store'))).toHaveLength(1);
    await store.remove('sb-kept');
  });

  it('refuses new sandboxes with 503 and the numbers when the store is full', async () => {
    const fill = join(dataDir, 'store', 'fill');
    await execa('fallocate', ['-l', `${Math.floor((GIB - STORE_MIN_FREE_BYTES) / MIB)}M`, fill], { reject: false });
    await execa('sync', ['-f', join(dataDir, 'store')]);
    const u = await store.usage();
    expect(u.freeBytes).toBeLessThan(STORE_MIN_FREE_BYTES);
    let err: unknown;
    try {
      store.assertRoom();
    } catch (e) {
      err = e;
    }
    expect(isCubeError(err) && err.kind === 'STORE_FULL' && err.http === 503).toBe(true);
    expect((err as Error).message).toMatch(/sandbox store .* is full: \d+ MiB free of \d+ MiB/);
    await rm(fill);
    await execa('sync', ['-f', join(dataDir, 'store')]);
    for (let i = 0; i < 50 && (await store.usage()).freeBytes < STORE_MIN_FREE_BYTES; i++) await new Promise((r) => setTimeout(r, 100));
    expect(() => store.assertRoom()).not.toThrow();
  });

  it('keeps volumes through a destroy: the image stays, unmounted, and holds them at the next open', async () => {
    const id = await store.makeVolume('vol-storetest000001', 64 * MIB, { uid: 1000, gid: 1000 });
    expect(id).toBeGreaterThan(0);
    const dir = join(store.volumesDir, 'vol-storetest000001');
    expect(await stat(dir)).toMatchObject({ ino: 256, uid: 1000, gid: 1000 });
    await writeFile(join(dir, 'kept.txt'), 'kept');
    expect(await store.volumeNames()).toEqual(['vol-storetest000001']);
    await store.close({ destroy: true });
    expect((await stat(join(dataDir, 'store.img'))).isFile()).toBe(true);
    expect((await readFile('/proc/self/mounts', 'utf8')).includes(join(dataDir, 'store'))).toBe(false);
    await reopen();
    expect(await readFile(join(dir, 'kept.txt'), 'utf8')).toBe('kept');
    await store.removeVolume('vol-storetest000001');
    await store.removeVolume('vol-storetest000001'); // idempotent
    expect(await store.volumeNames()).toEqual([]);
  });

  it('removes the mount and the image when destroyed', async () => {
    await store.close({ destroy: true });
    await expect(stat(join(dataDir, 'store.img'))).rejects.toMatchObject({ code: 'ENOENT' });
    expect((await readFile('/proc/self/mounts', 'utf8')).includes(join(dataDir, 'store'))).toBe(false);
    // The device goes once no mount namespace holds the filesystem: close() waits 15 s for it, but
    // a namespace another process copied while it was mounted (another test's daemon's helper,
    // until its refresh) can keep it longer under a loaded run. Waited for here, and named if not.
    const image = join(dataDir, 'store.img');
    for (let i = 0; i < 120 && (await loopDevicesOf(image)).length > 0; i++) await new Promise((r) => setTimeout(r, 500));
    const left = await loopDevicesOf(image);
    expect({ left, pinnedBy: left.length ? await mountHolders(left) : [] }).toEqual({ left: [], pinnedBy: [] });
    const { stdout } = await execa('losetup', ['-a']);
    expect(stdout).not.toContain(dataDir);
  }, 120_000);
});
