// Issue 29 item 6, the store's side: its mount is nosuid,nodev (a setuid binary in an upper dir or
// a layer never runs setuid from the host's side), a build step's writable layer becomes a tree of
// its own by a snapshot (no byte copied), and the layers of a data dir from an earlier version move
// into the store at start. On a real loop image under the test's own data dir, removed at the end.
import { existsSync } from 'node:fs';
import { chmod, chown, copyFile, mkdir, readFile, readdir, rm, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { execa } from 'execa';
import { beforeAll, describe, expect, it } from 'vitest';
import { LaunchHelper, nativeBinary } from '../../src/runtime/ns/helper.js';
import { BtrfsStore } from '../../src/storage/btrfs-store.js';
import { mountOptions } from '../../src/storage/mounts.js';
import { legacyLayersDir, migrateLayers, movedLayersDir } from '../../src/templates/layers/import.js';
import { layerDir, layersRoot } from '../../src/templates/store.js';
import { useLoopStore } from '../helpers/loop-store.js';

const MIB = 1024 ** 2;
const NOBODY = 65534;

describe('the store holding layers and upper dirs', () => {
  const loop = useLoopStore('store-layers');
  let dataDir = '';
  let store: BtrfsStore;
  beforeAll(() => ({ dataDir, store } = loop()));

  /** `id -u` as root, copied to `dir` owned by nobody with the setuid bit: 65534 where setuid works, 0 where the mount ignores it. */
  const setuidRun = async (dir: string): Promise<string> => {
    await mkdir(dir, { recursive: true });
    const bin = join(dir, 'id');
    await copyFile('/usr/bin/id', bin);
    await chown(bin, NOBODY, NOBODY);
    await chmod(bin, 0o4755); // after chown, which clears it
    expect((await stat(bin)).mode & 0o4000).toBe(0o4000);
    return (await execa(bin, ['-u'])).stdout.trim();
  };

  it('mounts the store nosuid,nodev: a setuid binary in an upper dir or a layer does not run setuid from the host', async () => {
    expect(await mountOptions(store.path)).toEqual(expect.arrayContaining(['nosuid', 'nodev']));
    const upper = store.upperDir('sb-suid');
    await store.take('sb-suid');
    try {
      expect(await setuidRun(join(upper, 'usr', 'bin'))).toBe('0');
      expect(await setuidRun(join(layersRoot(dataDir), 'sha256', 'f'.repeat(64), 'bin'))).toBe('0');
      // A store mounted by an earlier version (suid, dev): the same binary does run as its owner
      // there (what the check above would see without the flags), and the next open remounts it.
      await execa('mount', ['-o', 'remount,suid,dev', store.path]);
      expect(await mountOptions(store.path)).not.toContain('nosuid');
      expect(await setuidRun(join(upper, 'usr', 'bin'))).toBe(String(NOBODY));
      store = await loop().reopen();
      expect(await mountOptions(store.path)).toEqual(expect.arrayContaining(['nosuid', 'nodev']));
      expect(await setuidRun(join(upper, 'usr', 'bin'))).toBe('0');
    } finally {
      await store.remove('sb-suid');
      await rm(join(layersRoot(dataDir), 'sha256', 'f'.repeat(64)), { recursive: true, force: true });
    }
  });

  it('on a data dir that is on btrfs, binds the store onto itself nosuid,nodev; a destroy removes the bind', async () => {
    const fs = join(dataDir, 'btrfs-data');
    const image = join(dataDir, 'btrfs-data.img');
    await mkdir(fs);
    await execa('truncate', ['-s', '512M', image]);
    await execa('mkfs.btrfs', ['-q', image]);
    await execa('mount', ['-o', 'loop', image, fs]);
    try {
      const onBtrfs = new BtrfsStore({ dataDir: fs, helper: new LaunchHelper(nativeBinary('cube-launch')), imageGiB: 1 });
      await onBtrfs.open();
      expect((await onBtrfs.usage()).kind).toBe('btrfs');
      expect(existsSync(join(fs, 'store.img'))).toBe(false);
      expect(await mountOptions(onBtrfs.path)).toEqual(expect.arrayContaining(['nosuid', 'nodev']));
      expect(await setuidRun(join(onBtrfs.upperDir('sb-x'), 'bin'))).toBe('0');
      await onBtrfs.close({ destroy: true });
      expect(await mountOptions(onBtrfs.path)).toBeUndefined();
    } finally {
      await execa('umount', ['-l', join(fs, 'store')], { reject: false });
      await execa('umount', [fs], { reject: false });
      await rm(image, { force: true });
    }
  });

  it("captures a sandbox's upper dir as a tree of its own by a snapshot: its data shared, not copied", async () => {
    const upper = store.upperDir('sb-step');
    await store.take('sb-step');
    const dest = join(layersRoot(dataDir), 'tmp', 'build-sb-step');
    await mkdir(join(dest, '..'), { recursive: true });
    try {
      const data = Buffer.alloc(64 * MIB, 7);
      await mkdir(join(upper, 'opt', 'app'), { recursive: true });
      await writeFile(join(upper, 'opt', 'app', 'big'), data);
      await mkdir(join(upper, 'work')); // the layer's own /work and /upper, not the overlay's
      await writeFile(join(upper, 'upper'), 'a file named upper');
      await chmod(upper, 0o751);
      await execa('sync', ['-f', upper]);

      await store.captureUpper('sb-step', dest);
      expect((await stat(dest)).ino).toBe(256); // a subvolume: the snapshot
      expect((await readdir(dest)).sort()).toEqual(['opt', 'upper', 'work']);
      expect(await readdir(join(dest, 'work'))).toEqual([]); // the layer's, not overlay's work dir
      expect(await readFile(join(dest, 'upper'), 'utf8')).toBe('a file named upper');
      expect((await stat(dest)).mode & 0o7777).toBe(0o751); // the root is what overlay showed as /
      expect((await readFile(join(dest, 'opt', 'app', 'big'))).equals(data)).toBe(true);
      // No byte copied: the 64 MiB are shared with the sandbox's subvolume, neither holds them alone.
      await execa('sync', ['-f', dest]);
      const [id] = await store.subvolumeIDs([dest]);
      expect(await store.exclusiveBytes(id!)).toBeLessThan(MIB);
      // The sandbox goes (as a build step's does after the capture); the layer keeps its data.
      await store.remove('sb-step');
      expect((await readFile(join(dest, 'opt', 'app', 'big'))).equals(data)).toBe(true);
    } finally {
      await store.remove('sb-step');
      await rm(dest, { recursive: true, force: true }); // an empty subvolume goes with rmdir, as removeLayer does it
    }
    expect(existsSync(dest)).toBe(false);
  });

  it('moves the layers of a data dir from the previous version into the store at start, keeping the old tree while sandboxes may run on it', async () => {
    const hex = 'a'.repeat(64);
    const old = legacyLayersDir(dataDir);
    await mkdir(join(old, 'sha256', hex, 'etc'), { recursive: true });
    await writeFile(join(old, 'sha256', hex, 'etc', 'os-release'), 'ID=old\n');
    await execa('mknod', [join(old, 'sha256', hex, 'etc', 'motd'), 'c', '0', '0']); // a whiteout
    await writeFile(join(old, 'sha256', `${hex}.tree`), `sha256:${'b'.repeat(64)}\n`);
    await writeFile(join(old, 'images.json'), '{}\n');
    await mkdir(join(old, 'tmp', 'half-unpacked'), { recursive: true });
    try {
      expect(await migrateLayers(dataDir, 1)).toBe(3); // the layer, its .tree, images.json (tmp is scratch)
      const dir = layerDir(dataDir, `sha256:${hex}`);
      expect(await readFile(join(dir, 'etc', 'os-release'), 'utf8')).toBe('ID=old\n');
      expect((await stat(join(dir, 'etc', 'motd'))).isCharacterDevice()).toBe(true);
      expect(await readFile(`${dir}.tree`, 'utf8')).toBe(`sha256:${'b'.repeat(64)}\n`);
      expect(existsSync(join(layersRoot(dataDir), 'images.json'))).toBe(true);
      expect(dir.startsWith(`${store.path}/`)).toBe(true); // on the store's filesystem, nosuid,nodev
      expect(existsSync(old)).toBe(false);
      expect(existsSync(join(movedLayersDir(dataDir), 'sha256', hex, 'etc', 'os-release'))).toBe(true); // a sandbox taken back runs on it
      expect(await migrateLayers(dataDir, 0)).toBe(0); // a start with no sandbox taken back: the old tree goes
      expect(existsSync(movedLayersDir(dataDir))).toBe(false);
    } finally {
      await rm(old, { recursive: true, force: true });
      await rm(movedLayersDir(dataDir), { recursive: true, force: true });
      await rm(layersRoot(dataDir), { recursive: true, force: true });
    }
  });
});
