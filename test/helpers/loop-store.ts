// A btrfs store on a real loop image (1 GiB, sparse) under a test file's own data dir: opened
// before its tests, destroyed after them (close({ destroy: true }), a lazy unmount if a test died
// half-way, the data dir removed with the image).
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execa } from 'execa';
import { afterAll, beforeAll } from 'vitest';
import { LaunchHelper } from '../../src/runtime/ns/helper.js';
import { BtrfsStore } from '../../src/storage/btrfs-store.js';

const repo = join(import.meta.dirname, '..', '..');

export interface LoopStore {
  dataDir: string;
  /** The store last opened. */
  store: BtrfsStore;
  /** A new BtrfsStore on the same data dir, opened (a restart): the one `store` is from then on. */
  reopen(): Promise<BtrfsStore>;
}

export function useLoopStore(name: string): () => LoopStore {
  const helper = new LaunchHelper(join(repo, 'build', 'cube-launch'));
  const s: LoopStore = {
    dataDir: '',
    store: undefined as unknown as BtrfsStore,
    async reopen() {
      s.store = new BtrfsStore({ dataDir: s.dataDir, helper, imageGiB: 1 });
      await s.store.open();
      return s.store;
    },
  };
  beforeAll(async () => {
    await execa('node', [join(repo, 'scripts', 'build-native.mjs')]);
    s.dataDir = await mkdtemp(join(tmpdir(), `cubed-test-${name}-`));
    await s.reopen();
  });
  afterAll(async () => {
    try {
      await s.store.close({ destroy: true });
    } finally {
      const mp = join(s.dataDir, 'store');
      if ((await readFile('/proc/self/mounts', 'utf8')).split('\n').some((l) => l.split(' ')[1] === mp)) await execa('umount', ['-l', mp], { reject: false });
      await rm(s.dataDir, { recursive: true, force: true });
    }
  });
  return () => s;
}
