// Loop devices of the sandbox store's image: which are attached, and what still holds one.
import { readFile, readdir, readlink } from 'node:fs/promises';
import { join } from 'node:path';

/** Loop devices backed by `file` (read from sysfs; a deleted file shows with a " (deleted)" suffix). */
export async function loopDevicesOf(file: string): Promise<string[]> {
  const out: string[] = [];
  for (const dev of await readdir('/sys/block').catch(() => [] as string[])) {
    if (!dev.startsWith('loop')) continue;
    const backing = await readFile(join('/sys/block', dev, 'loop', 'backing_file'), 'utf8').catch(() => '');
    if (backing.trim().replace(/ \(deleted\)$/, '') === file) out.push(`/dev/${dev}`);
  }
  return out;
}

/**
 * Pids (with their command) whose mount namespace still mounts one of `devices` (/dev/loopN):
 * what keeps an unmounted loop-backed filesystem alive. Matched by the mount's source (btrfs
 * mounts show an anonymous device number, not the loop device's). A scan of every process's
 * mountinfo, for the slow path only.
 */
export async function mountHolders(devices: readonly string[]): Promise<string[]> {
  const wanted = new Set(devices);
  const seen = new Set<string>();
  const out: string[] = [];
  for (const pid of await readdir('/proc').catch(() => [] as string[])) {
    if (!/^\d+$/.test(pid)) continue;
    // A process that ended meanwhile reads as empty: it holds nothing any more.
    const [ns, info] = await Promise.all([readlink(`/proc/${pid}/ns/mnt`).catch(() => ''), readFile(`/proc/${pid}/mountinfo`, 'utf8').catch(() => '')]);
    if (!ns || seen.has(ns) || !info.split('\n').some((l) => wanted.has(l.split(' - ')[1]?.split(' ')[1] ?? ''))) continue;
    seen.add(ns);
    const comm = await readFile(`/proc/${pid}/cmdline`, 'utf8').catch(() => '');
    out.push(`${pid} ${comm.split('\0').join(' ').trim().slice(0, 120)}`);
  }
  return out;
}
