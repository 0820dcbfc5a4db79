// The block devices under a btrfs filesystem, as I/O limits name them: the sandbox store's loop
// device (or its disks when the data dir is btrfs itself) is where a sandbox's writes are
// throttled (cgroups.ts ioLimitWrites).
import { readFile, readdir, realpath } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { statOrAbsent } from '../fsx.js';

/**
 * "MAJ:MIN" of each device of the btrfs filesystem `fsid`, a partition as its whole disk (the
 * kernel takes throttle rules on whole disks only).
 *
 * Why the store's own device and not the disk under its image: measured with a loop-mounted
 * btrfs image on vda, a 1 MiB write + fsync loop in a blkio cgroup limited to 20 MiB/s on the loop
 * device ran at 15.8 MiB/s; limited on vda instead it ran at 121 MiB/s (the loop device's worker
 * writes the image file, and cgroup v1 charges none of that to the writer: 0 bytes on vda).
 */
export async function btrfsDevices(fsid: string): Promise<string[]> {
  const dir = join('/sys/fs/btrfs', fsid, 'devices');
  const out: string[] = [];
  for (const name of await readdir(dir)) {
    let dev = await realpath(join(dir, name));
    if ((await statOrAbsent(join(dev, 'partition'))) !== undefined) dev = dirname(dev);
    out.push((await readFile(join(dev, 'dev'), 'utf8')).trim());
  }
  return [...new Set(out)];
}
