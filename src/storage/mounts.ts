// The store's mount as the kernel shows it: what is mounted at a path, with which options, and
// making it nosuid,nodev.
import { readFile } from 'node:fs/promises';

/** Mount options every store mount has. */
export const SECURE_OPTIONS = ['nosuid', 'nodev'] as const;

/** /proc/mounts and mountinfo escape space, tab, newline and backslash as octal. */
function unescapeMount(s: string): string {
  return s.replace(/\\([0-7]{3})/g, (_, o: string) => String.fromCharCode(parseInt(o, 8)));
}

/** The source of the mount at `path`, if something is mounted exactly there. */
export async function mountSource(path: string): Promise<string | undefined> {
  for (const line of (await readFile('/proc/self/mounts', 'utf8')).split('\n')) {
    const [src, mp] = line.split(' ');
    if (mp && unescapeMount(mp) === path) return src;
  }
  return undefined;
}

/** The per-mount options (mountinfo field 6) of the mount at exactly `path`, or undefined when nothing is mounted there. */
export async function mountOptions(path: string): Promise<string[] | undefined> {
  let found: string[] | undefined;
  for (const line of (await readFile('/proc/self/mountinfo', 'utf8')).split('\n')) {
    const f = line.split(' ');
    if (f[4] !== undefined && unescapeMount(f[4]) === path) found = f[5]!.split(','); // the last one mounted there is the one seen
  }
  return found;
}

/**
 * Makes the store's mount at `path` nosuid,nodev: template layers and sandboxes' upper dirs hold
 * what images and root inside sandboxes made (setuid-root binaries, device nodes), which must never
 * run setuid or open a device from the host's side (issue 29: they sat on the host's root
 * filesystem, mounted without either). Sandboxes see them through their own overlay mount, whose
 * flags are its own (nosuid,nodev too: test/hostile/files-reach.test.ts). A store mounted by an
 * earlier version is remounted so; on a btrfs data dir (`bind`) the store is a plain directory,
 * bind-mounted onto itself for the flags. `run` runs a host command, failing on a non-zero exit.
 */
export async function secureMount(path: string, bind: boolean, run: (argv: string[]) => Promise<void>): Promise<void> {
  let opts = await mountOptions(path);
  if (opts === undefined) {
    await run(['mount', '--bind', path, path]);
    opts = [];
  }
  if (SECURE_OPTIONS.every((o) => opts.includes(o))) return;
  // A bind mount's flags change with remount,bind; the loop mount's own with a plain remount.
  await run(['mount', '-o', `remount,${bind ? 'bind,' : ''}${SECURE_OPTIONS.join(',')}`, path]);
}
