// Disk images of the microvm runtime, cached under <dataDir>/microvm/images:
// - a template's root filesystem flattened into a read-only ext4 image (`mkfs.ext4 -d`), made once
//   per template digest (a directory template without one: name, path and its mtime);
// - a blank ext4 of N GiB (sparse, no journal: a sandbox's disk is disposable) per size, the
//   backing file of every sandbox's writable disk, which is a qcow2 overlay on it (one
//   `qemu-img create`, about 10 ms, instead of a mkfs per sandbox).
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, rename, rm } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import { CubeError } from '../../errors.js';
import type { TemplateRef } from '../types.js';
import { statOrAbsent } from '../../fsx.js';

/** Runs a tool; rejects with its stderr. */
export function run(cmd: string, args: string[], opts: { cwd?: string } = {}): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'], ...opts });
    let out = '';
    let err = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr.on('data', (d: Buffer) => (err += d.toString()));
    child.once('error', (e) => reject(new Error(`${cmd}: ${e.message}`)));
    child.once('close', (code) => (code === 0 ? resolve(out) : reject(new Error(`${cmd} ${args.join(' ')}: ${err.trim() || `exit ${code}`}`))));
  });
}

export class ImageCache {
  private readonly dir: string;
  private readonly building = new Map<string, Promise<string>>();

  constructor(dataDir: string) {
    this.dir = join(dataDir, 'microvm', 'images');
  }

  /** A stable key of what the template's image holds: its digest, else (a directory template) its path and mtime. */
  async templateKey(t: TemplateRef): Promise<string> {
    if (t.bindHostUsr) {
      throw new CubeError(
        'BAD_REQUEST',
        `template '${t.name}' borrows the host's /usr and has no bootable root filesystem of its own: the microvm runtime needs an image template (imported, or a registered root filesystem directory)`,
      );
    }
    if (t.digest) return t.digest.slice(7, 23);
    const rootfs = t.layers[0]!;
    const st = await statOrAbsent(rootfs);
    if (!st?.isDirectory()) throw new CubeError('BAD_REQUEST', `template '${t.name}': ${rootfs} is not a directory`);
    return createHash('sha256')
      .update(`${t.name}\0${t.layers.join('\0')}\0${st.mtimeMs}`)
      .digest('hex')
      .slice(0, 16);
  }

  /** The template's read-only ext4 image, made on first use (a layer stack is flattened through a read-only overlay mount). */
  async template(t: TemplateRef): Promise<string> {
    const key = await this.templateKey(t);
    return this.once(`tmpl-${key}.ext4`, async (tmp) => {
      await withFlatRoot(t.layers, join(this.dir, `cube-mnt-${key}`), async (root) => {
        // Room for the files, their inodes and ext4's own metadata.
        const used = Number((await run('du', ['-sb', '--apparent-size', root])).split(/\s/)[0]);
        const bytes = Math.ceil((used * 1.3 + 64 * 1024 * 1024) / (1024 * 1024)) * 1024 * 1024;
        await run('truncate', ['-s', String(bytes), tmp]);
        await run('mkfs.ext4', ['-q', '-F', '-O', '^has_journal', '-m', '0', '-N', String(Math.max(16384, Math.ceil(bytes / 8192))), '-d', root, tmp]);
      });
    });
  }

  /** A blank ext4 of `gib` GiB, the backing file of sandboxes' writable disks. */
  blank(gib: number): Promise<string> {
    return this.once(`blank-${gib}g.ext4`, async (tmp) => {
      await mkdir(this.dir, { recursive: true });
      await run('truncate', ['-s', `${gib}G`, tmp]);
      await run('mkfs.ext4', ['-q', '-F', '-O', '^has_journal', '-m', '0', tmp]);
    });
  }

  /** Builds `name` once (concurrent callers share it) into a scratch file renamed into place. */
  private once(name: string, build: (tmp: string) => Promise<void>): Promise<string> {
    const path = join(this.dir, name);
    let p = this.building.get(name);
    if (!p) {
      p = (async () => {
        if (existsSync(path)) return path;
        await mkdir(this.dir, { recursive: true });
        const tmp = `${path}.${process.pid}.tmp`;
        try {
          await build(tmp);
          await rename(tmp, path);
        } catch (e) {
          await rm(tmp, { force: true });
          throw new CubeError('CREATE_FAILED', `building ${name}: ${(e as Error).message}`, { cause: e });
        }
        return path;
      })();
      this.building.set(name, p);
      p.catch(() => this.building.delete(name));
    }
    return p;
  }
}

/** The sandbox's writable disk: a qcow2 overlay whose backing file is `base` (raw or qcow2). */
export async function overlayDisk(base: string, path: string, format: 'raw' | 'qcow2'): Promise<void> {
  await run('qemu-img', ['create', '-q', '-f', 'qcow2', '-F', format, '-b', base, path]);
}

/**
 * Runs `f` on one directory holding the template's root: the only layer itself, or the layers
 * (LOWEST first) mounted as a read-only overlay at `mnt` (lowerdir only, names relative to their
 * shared parent so a deep stack fits the option page), unmounted afterwards.
 */
async function withFlatRoot<T>(layers: string[], mnt: string, f: (root: string) => Promise<T>): Promise<T> {
  if (layers.length === 1) return f(layers[0]!);
  const top = [...layers].reverse();
  const parent = dirname(top[0]!);
  const shared = top.every((l) => dirname(l) === parent);
  await mkdir(mnt, { recursive: true });
  await run(
    'mount',
    ['-t', 'overlay', 'cube-template', '-o', `ro,lowerdir=${shared ? top.map((l) => basename(l)).join(':') : top.join(':')}`, mnt],
    shared ? { cwd: parent } : {},
  );
  try {
    return await f(mnt);
  } finally {
    await run('umount', [mnt]).catch(() => run('umount', ['-l', mnt]));
    await rm(mnt, { recursive: true, force: true });
  }
}
