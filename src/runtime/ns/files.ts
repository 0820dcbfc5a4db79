// File access to a sandbox from the host, through /proc/<init>/root (works while the sandbox is
// paused: no sandbox process is involved). The kernel does not confine host-side path walks to
// that root (`..` and absolute symlinks would reach the host), so every component is resolved
// here: lstat + readlink, absolute links restart at the sandbox root, and a walk that would leave
// the root is refused. The virtual filesystems (/proc, /dev, /sys) are not reachable this way.
import { constants } from 'node:fs';
import { chown, lstat, mkdir, open, readdir, readlink, rename, rm } from 'node:fs/promises';
import type { Stats } from 'node:fs';
import type { Readable } from 'node:stream';
import { CubeError } from '../../errors.js';
import { SANDBOX_USERS, sandboxUser } from '../templates.js';
import type { FileStat, SandboxFiles, SandboxHandle } from '../types.js';

const MAX_LINKS = 40;
const VIRTUAL_ROOTS = new Set(['proc', 'dev', 'sys']);

/** Components of a path inside the sandbox; relative paths start at /home/user; `..` is refused (pure). */
export function splitSandboxPath(path: string): string[] {
  if (typeof path !== 'string' || path === '' || path.includes('\0')) throw new CubeError('BAD_REQUEST', `invalid path '${path}'`);
  const abs = path.startsWith('/') ? path : `${SANDBOX_USERS.user.home}/${path}`;
  const comps = abs.split('/').filter((c) => c !== '' && c !== '.');
  if (comps.includes('..')) throw new CubeError('BAD_REQUEST', `path '${path}' contains '..'`);
  return comps;
}

export function sandboxPath(comps: string[]): string {
  return '/' + comps.join('/');
}

interface Resolved {
  /** Real location inside the sandbox, symlinks resolved (the last one only when followed). */
  comps: string[];
  /** lstat of the last component; undefined when it does not exist. */
  stat?: Stats;
}

/**
 * Resolves `comps` below `root` without ever letting the kernel follow a symlink. With
 * `followLast` false the last component is not followed (stat, remove, move act on the link).
 * A missing component ends the walk: the rest is returned as not existing.
 */
export async function resolveInRoot(root: string, comps: string[], followLast: boolean): Promise<Resolved> {
  let done: string[] = [];
  const todo = [...comps];
  let links = 0;
  const escape = () => new CubeError('BAD_REQUEST', `path '${sandboxPath(comps)}' leads out of the sandbox`);
  while (todo.length) {
    const c = todo.shift()!;
    if (c === '' || c === '.') continue;
    if (c === '..') {
      if (!done.length) throw escape();
      done.pop();
      continue;
    }
    const candidate = [...done, c];
    if (VIRTUAL_ROOTS.has(candidate[0]!)) throw new CubeError('BAD_REQUEST', `'/${candidate[0]}' is not accessible through the files API`);
    let st: Stats;
    try {
      st = await lstat(root + sandboxPath(candidate));
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code;
      if (code !== 'ENOENT') throw fsError(e, sandboxPath(candidate));
      if (todo.includes('..')) throw escape();
      return { comps: [...candidate, ...todo.filter((t) => t !== '' && t !== '.')] };
    }
    const last = todo.length === 0;
    if (st.isSymbolicLink() && (!last || followLast)) {
      if (++links > MAX_LINKS) throw new CubeError('BAD_REQUEST', `too many symlinks in '${sandboxPath(comps)}'`);
      const target = await readlink(root + sandboxPath(candidate));
      if (target.startsWith('/')) done = [];
      todo.unshift(...target.split('/'));
      continue;
    }
    if (!last && !st.isDirectory()) throw new CubeError('BAD_REQUEST', `'${sandboxPath(candidate)}' is not a directory`);
    done = candidate;
    if (last) return { comps: done, stat: st };
  }
  // The walk ended on the root or on a link whose target ends in `..` or `.`.
  return { comps: done, stat: await lstat(root + sandboxPath(done)).catch((e: unknown) => { throw fsError(e, sandboxPath(done)); }) };
}

function fsError(e: unknown, path: string): CubeError {
  const code = (e as NodeJS.ErrnoException).code;
  switch (code) {
    case 'ENOENT':
    case 'ESRCH':
      return new CubeError('NOT_FOUND', `'${path}' not found`, { cause: e });
    case 'EISDIR':
      return new CubeError('BAD_REQUEST', `'${path}' is a directory`, { cause: e });
    case 'ENOTDIR':
      return new CubeError('BAD_REQUEST', `'${path}' is not a directory`, { cause: e });
    case 'EEXIST':
      return new CubeError('CONFLICT', `'${path}' already exists`, { cause: e });
    case 'ENOTEMPTY':
      return new CubeError('CONFLICT', `'${path}' is not empty`, { cause: e });
    case 'EROFS':
      return new CubeError('BAD_REQUEST', `'${path}' is on a read-only filesystem`, { cause: e });
    case 'ELOOP':
      return new CubeError('BAD_REQUEST', `'${path}' changed into a symlink while being accessed`, { cause: e });
    case 'ENOSPC':
    case 'EDQUOT':
      return new CubeError('BAD_REQUEST', `no space left for '${path}'`, { cause: e });
    default:
      return new CubeError('INTERNAL', `'${path}': ${(e as Error).message}`, { cause: e });
  }
}

export function toFileStat(path: string, st: Stats, symlinkTarget?: string): FileStat {
  const type = st.isFile() ? 'file' : st.isDirectory() ? 'dir' : st.isSymbolicLink() ? 'symlink' : 'other';
  return {
    name: path === '/' ? '/' : path.slice(path.lastIndexOf('/') + 1),
    path,
    type,
    size: st.size,
    mode: st.mode & 0o7777,
    uid: st.uid,
    gid: st.gid,
    mtime: st.mtime,
    ...(symlinkTarget !== undefined ? { symlinkTarget } : {}),
  };
}

export class NsFiles implements SandboxFiles {
  /** `alive` tells that initPid is still this sandbox's init: a reused pid would be a host process's root. */
  constructor(private readonly alive: (h: SandboxHandle) => boolean) {}

  private root(h: SandboxHandle): string {
    if (!this.alive(h)) throw new CubeError('NOT_FOUND', `sandbox ${h.sandboxID} is not running`);
    return `/proc/${h.initPid}/root`;
  }

  private async statAt(root: string, comps: string[], st: Stats): Promise<FileStat> {
    const target = st.isSymbolicLink() ? await readlink(root + sandboxPath(comps)) : undefined;
    return toFileStat(sandboxPath(comps), st, target);
  }

  private async existing(h: SandboxHandle, path: string, followLast: boolean): Promise<{ comps: string[]; stat: Stats }> {
    const r = await resolveInRoot(this.root(h), splitSandboxPath(path), followLast);
    if (!r.stat) throw new CubeError('NOT_FOUND', `'${path}' not found`);
    return { comps: r.comps, stat: r.stat };
  }

  /** Creates each missing directory of `comps` (from `from` on), owned by the user. */
  private async makeDirs(root: string, comps: string[], from: number, owner: { uid: number; gid: number }): Promise<void> {
    for (let i = from; i < comps.length; i++) {
      const p = root + sandboxPath(comps.slice(0, i + 1));
      try {
        await mkdir(p, { mode: 0o755 });
        await chown(p, owner.uid, owner.gid);
      } catch (e) {
        throw fsError(e, sandboxPath(comps.slice(0, i + 1)));
      }
    }
  }

  /** Index of the first component of `comps` that does not exist yet (after a walk that stopped there). */
  private async firstMissing(root: string, comps: string[]): Promise<number> {
    for (let i = comps.length; i > 0; i--) {
      const ok = await lstat(root + sandboxPath(comps.slice(0, i))).then(() => true, () => false);
      if (ok) return i;
    }
    return 0;
  }

  async stat(h: SandboxHandle, path: string): Promise<FileStat> {
    const { comps, stat } = await this.existing(h, path, false);
    return this.statAt(this.root(h), comps, stat);
  }

  async list(h: SandboxHandle, path: string, depth = 1): Promise<FileStat[]> {
    const root = this.root(h);
    const { comps, stat } = await this.existing(h, path, true);
    if (!stat.isDirectory()) throw new CubeError('BAD_REQUEST', `'${path}' is not a directory`);
    const out: FileStat[] = [];
    const walk = async (dir: string[], level: number): Promise<void> => {
      const names = await readdir(root + sandboxPath(dir)).catch((e: unknown) => { throw fsError(e, sandboxPath(dir)); });
      for (const name of names.sort()) {
        const child = [...dir, name];
        const st = await lstat(root + sandboxPath(child)).catch(() => undefined);
        if (!st) continue; // removed meanwhile
        out.push(await this.statAt(root, child, st));
        if (level < depth && st.isDirectory()) await walk(child, level + 1);
      }
    };
    await walk(comps, 1);
    return out;
  }

  async read(h: SandboxHandle, path: string): Promise<Readable> {
    const { comps, stat } = await this.existing(h, path, true);
    if (!stat.isFile()) throw new CubeError('BAD_REQUEST', `'${path}' is not a regular file`);
    const fh = await open(this.root(h) + sandboxPath(comps), constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK).catch(
      (e: unknown) => { throw fsError(e, path); },
    );
    return fh.createReadStream();
  }

  async write(h: SandboxHandle, path: string, data: Readable | Buffer, user?: string): Promise<FileStat> {
    const owner = sandboxUser(user);
    const root = this.root(h);
    const r = await resolveInRoot(root, splitSandboxPath(path), true);
    if (!r.comps.length) throw new CubeError('BAD_REQUEST', `cannot write to '/'`);
    if (r.stat && !r.stat.isFile()) throw new CubeError('BAD_REQUEST', `'${path}' is not a regular file`);
    if (!r.stat) await this.makeDirs(root, r.comps.slice(0, -1), await this.firstMissing(root, r.comps.slice(0, -1)), owner);
    const file = root + sandboxPath(r.comps);
    const fh = await open(file, constants.O_WRONLY | constants.O_CREAT | constants.O_TRUNC | constants.O_NOFOLLOW, 0o644).catch(
      (e: unknown) => { throw fsError(e, path); },
    );
    try {
      if (!r.stat) await fh.chown(owner.uid, owner.gid);
      if (Buffer.isBuffer(data)) await fh.writeFile(data);
      else for await (const chunk of data) await fh.write(typeof chunk === 'string' ? Buffer.from(chunk) : (chunk as Buffer));
      return toFileStat(sandboxPath(r.comps), await fh.stat());
    } catch (e) {
      throw e instanceof CubeError ? e : fsError(e, path);
    } finally {
      await fh.close();
    }
  }

  async mkdir(h: SandboxHandle, path: string, user?: string): Promise<boolean> {
    const owner = sandboxUser(user);
    const root = this.root(h);
    const r = await resolveInRoot(root, splitSandboxPath(path), true);
    if (r.stat) {
      if (r.stat.isDirectory()) return false;
      throw new CubeError('CONFLICT', `'${path}' exists and is not a directory`);
    }
    await this.makeDirs(root, r.comps, await this.firstMissing(root, r.comps), owner);
    return true;
  }

  async remove(h: SandboxHandle, path: string): Promise<void> {
    const { comps } = await this.existing(h, path, false);
    if (!comps.length) throw new CubeError('BAD_REQUEST', `cannot remove '/'`);
    await rm(this.root(h) + sandboxPath(comps), { recursive: true }).catch((e: unknown) => { throw fsError(e, path); });
  }

  async move(h: SandboxHandle, from: string, to: string): Promise<FileStat> {
    const root = this.root(h);
    const src = await this.existing(h, from, false);
    if (!src.comps.length) throw new CubeError('BAD_REQUEST', `cannot move '/'`);
    const dst = await resolveInRoot(root, splitSandboxPath(to), false);
    if (!dst.comps.length) throw new CubeError('BAD_REQUEST', `cannot move onto '/'`);
    const parent = dst.comps.slice(0, -1);
    await this.makeDirs(root, parent, await this.firstMissing(root, parent), { uid: src.stat.uid, gid: src.stat.gid });
    await rename(root + sandboxPath(src.comps), root + sandboxPath(dst.comps)).catch((e: unknown) => { throw fsError(e, to); });
    return this.stat(h, sandboxPath(dst.comps));
  }
}
