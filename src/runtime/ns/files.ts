// File access to a sandbox from the host, through /proc/<init>/root (works while the sandbox is
// paused: no sandbox process is involved). The kernel does not confine host-side path walks to
// that root (`..` and absolute symlinks would reach the host), and the sandbox's own processes
// may swap any directory for a symlink at any moment. So the walk never hands the kernel more
// than one component: each directory is held open (O_PATH) and the next name is looked up below
// it through /proc/self/fd/N with O_NOFOLLOW; symlinks are read and resolved here (absolute ones
// restart at the sandbox root), a walk that would leave the root is refused, and every final
// operation (open, mkdir, unlink, rename) names a held directory plus one component. A swap in
// between makes an operation fail (ELOOP, ENOTDIR) or act on another file of the same sandbox,
// never on the host. The virtual filesystems (/proc, /dev, /sys) are not reachable this way.
import { constants } from 'node:fs';
import { lchown, lstat, mkdir, open, readdir, readlink, rename, rmdir, unlink } from 'node:fs/promises';
import type { FileHandle } from 'node:fs/promises';
import type { Stats } from 'node:fs';
import type { Readable } from 'node:stream';
import { CubeError } from '../../errors.js';
import { SANDBOX_USERS, sandboxUser } from '../templates.js';
import type { FileStat, SandboxFiles, SandboxHandle } from '../types.js';
import { ID_RANGE } from './ids.js';

const MAX_LINKS = 40;
const VIRTUAL_ROOTS = new Set(['proc', 'dev', 'sys']);
/** Linux O_PATH (not in Node's constants): a handle that only anchors lookups, needs no read permission. */
const O_PATH = 0o10000000;
const DIR_HANDLE = O_PATH | constants.O_DIRECTORY | constants.O_NOFOLLOW;

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

/** The host path of `name` below the held directory `dir` (one component, never followed by the caller's flags). */
function below(dir: FileHandle, name?: string): string {
  return name === undefined ? `/proc/self/fd/${dir.fd}` : `/proc/self/fd/${dir.fd}/${name}`;
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

/** The kernel's id for host ids a user namespace does not map (/proc/sys/kernel/overflowuid). */
const OVERFLOW_ID = 65534;

/** A host id as the sandbox whose ids start at `idBase` sees it (pure). */
export function insideId(id: number, idBase: number | undefined): number {
  if (idBase === undefined) return id;
  return id >= idBase && id < idBase + ID_RANGE ? id - idBase : OVERFLOW_ID;
}

/** `idBase`: the first host id of the sandbox's own range (its files show host ids through /proc/<init>/root). */
export function toFileStat(path: string, st: Stats, symlinkTarget?: string, idBase?: number): FileStat {
  const type = st.isFile() ? 'file' : st.isDirectory() ? 'dir' : st.isSymbolicLink() ? 'symlink' : 'other';
  return {
    name: path === '/' ? '/' : path.slice(path.lastIndexOf('/') + 1),
    path,
    type,
    size: st.size,
    mode: st.mode & 0o7777,
    uid: insideId(st.uid, idBase),
    gid: insideId(st.gid, idBase),
    mtime: st.mtime,
    ...(symlinkTarget !== undefined ? { symlinkTarget } : {}),
  };
}

/** Where a walk ended: `dir` holds the parent of `name`, or the deepest existing directory when `missing` is not empty. */
interface Located {
  /** Real location inside the sandbox (symlinks resolved), for messages and results. */
  comps: string[];
  dir: FileHandle;
  /** The last component when it exists; undefined for the sandbox root itself or when `missing` is not empty. */
  name?: string;
  stat?: Stats;
  /** Components below `dir` that do not exist (the first one is missing). */
  missing: string[];
}

/** One file operation: the directory handles it opened, all closed by `close()`. */
class Walk {
  private readonly held: FileHandle[] = [];

  private constructor(readonly root: FileHandle) {
    this.held.push(root);
  }

  /** Opens the sandbox root; `alive` is asked after the open, whose handle pins that process's root even if the pid were reused later. */
  static async start(h: SandboxHandle, alive: (h: SandboxHandle) => boolean): Promise<Walk> {
    const gone = () => new CubeError('NOT_FOUND', `sandbox ${h.sandboxID} is not running`);
    if (!alive(h)) throw gone();
    const root = await open(`/proc/${h.initPid}/root`, O_PATH | constants.O_DIRECTORY).catch(() => {
      throw gone();
    });
    const walk = new Walk(root);
    if (!alive(h)) {
      await walk.close();
      throw gone();
    }
    return walk;
  }

  async close(): Promise<void> {
    await Promise.all(this.held.splice(0).map((fh) => fh.close().catch(() => {})));
  }

  /** Opens the directory `name` below `dir` without following a symlink there. */
  async openDir(dir: FileHandle, name: string, path: string): Promise<FileHandle> {
    const fh = await open(below(dir, name), DIR_HANDLE).catch((e: unknown) => {
      throw fsError(e, path);
    });
    this.held.push(fh);
    return fh;
  }

  /** Resolves `comps` one component at a time; with `followLast` false the last one is not followed (stat, remove, move act on a link). */
  async locate(comps: string[], followLast: boolean): Promise<Located> {
    const shown = sandboxPath(comps);
    const escape = () => new CubeError('BAD_REQUEST', `path '${shown}' leads out of the sandbox`);
    let stack: { name: string; dir: FileHandle }[] = [];
    const top = () => stack.at(-1)?.dir ?? this.root;
    const done = () => stack.map((s) => s.name);
    const todo = [...comps];
    let links = 0;
    while (todo.length) {
      const c = todo.shift()!;
      if (c === '' || c === '.') continue;
      if (c === '..') {
        if (!stack.length) throw escape();
        stack.pop();
        continue;
      }
      if (!stack.length && VIRTUAL_ROOTS.has(c)) throw new CubeError('BAD_REQUEST', `'/${c}' is not accessible through the files API`);
      const path = sandboxPath([...done(), c]);
      let st: Stats;
      try {
        st = await lstat(below(top(), c));
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw fsError(e, path);
        const missing = [c, ...todo.filter((t) => t !== '' && t !== '.')];
        if (missing.includes('..')) throw escape();
        return { comps: [...done(), ...missing], dir: top(), missing };
      }
      const last = todo.length === 0;
      if (st.isSymbolicLink() && (!last || followLast)) {
        if (++links > MAX_LINKS) throw new CubeError('BAD_REQUEST', `too many symlinks in '${shown}'`);
        const target = await readlink(below(top(), c)).catch((e: unknown) => {
          throw fsError(e, path);
        });
        if (target.startsWith('/')) stack = [];
        todo.unshift(...target.split('/'));
        continue;
      }
      if (last) return { comps: [...done(), c], dir: top(), name: c, stat: st, missing: [] };
      if (!st.isDirectory()) throw new CubeError('BAD_REQUEST', `'${path}' is not a directory`);
      try {
        stack.push({ name: c, dir: await this.openDir(top(), c, path) });
      } catch (e) {
        // Swapped for a symlink since the lstat: look at it again.
        if ((e as CubeError).cause && ((e as CubeError).cause as NodeJS.ErrnoException).code === 'ELOOP') {
          todo.unshift(c);
          continue;
        }
        throw e;
      }
    }
    // The walk ended on the root or on a directory reached by `..` or a link ending in `.`/`..`.
    const end = stack.pop();
    if (!end) return { comps: [], dir: this.root, stat: await this.root.stat(), missing: [] };
    const parent = top();
    const stat = await lstat(below(parent, end.name)).catch((e: unknown) => {
      throw fsError(e, sandboxPath([...done(), end.name]));
    });
    return { comps: [...done(), end.name], dir: parent, name: end.name, stat, missing: [] };
  }

  /** The located directory itself, open. */
  async enter(at: Located): Promise<FileHandle> {
    return at.name === undefined ? at.dir : this.openDir(at.dir, at.name, sandboxPath(at.comps));
  }

  /** Creates `names` one below the other under `dir`, owned by `owner`; returns the deepest, open. */
  async makeDirs(dir: FileHandle, names: string[], base: string[], owner: { uid: number; gid: number }): Promise<FileHandle> {
    const comps = [...base];
    for (const name of names) {
      comps.push(name);
      const path = sandboxPath(comps);
      try {
        await mkdir(below(dir, name), { mode: 0o755 });
        // lchown: if the sandbox swapped it for a link meanwhile, only the link changes owner.
        await lchown(below(dir, name), owner.uid, owner.gid);
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw fsError(e, path);
      }
      dir = await this.openDir(dir, name, path);
    }
    return dir;
  }

  /** Removes `name` below `dir`, a directory tree depth first, never following a link. */
  async removeTree(dir: FileHandle, name: string, path: string): Promise<void> {
    const st = await lstat(below(dir, name)).catch((e: unknown) => {
      throw fsError(e, path);
    });
    if (!st.isDirectory()) {
      await unlink(below(dir, name)).catch((e: unknown) => {
        if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw fsError(e, path);
      });
      return;
    }
    let sub: FileHandle;
    try {
      sub = await this.openDir(dir, name, path);
    } catch (e) {
      const code = ((e as CubeError).cause as NodeJS.ErrnoException | undefined)?.code;
      if (code === 'ELOOP' || code === 'ENOTDIR') return this.removeTree(dir, name, path); // swapped meanwhile
      if (code === 'ENOENT') return;
      throw e;
    }
    for (const child of await readdir(below(sub)).catch((e: unknown) => { throw fsError(e, path); })) {
      await this.removeTree(sub, child, `${path}/${child}`).catch((e: unknown) => {
        if (!(e instanceof CubeError && e.kind === 'NOT_FOUND')) throw e;
      });
    }
    await rmdir(below(dir, name)).catch((e: unknown) => {
      if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw fsError(e, path);
    });
  }
}

export class NsFiles implements SandboxFiles {
  /**
   * `alive` tells that initPid is still this sandbox's init: a reused pid would be a host process's root.
   * `idBase`: the first host id of the sandbox's own range, undefined when its ids are the host's.
   */
  constructor(
    private readonly alive: (h: SandboxHandle) => boolean,
    private readonly idBase: (h: SandboxHandle) => number | undefined,
  ) {}

  /** The host ids files of `user` get in `h` (created from here, as host root, then chowned). */
  private owner(h: SandboxHandle, user: string | undefined): { uid: number; gid: number } {
    const u = sandboxUser(user);
    const base = this.idBase(h) ?? 0;
    return { uid: base + u.uid, gid: base + u.gid };
  }

  /** Runs `fn` with a walk of `h`'s root, closing every handle it opened afterwards. */
  private async within<T>(h: SandboxHandle, fn: (w: Walk) => Promise<T>): Promise<T> {
    const w = await Walk.start(h, this.alive);
    try {
      return await fn(w);
    } finally {
      await w.close();
    }
  }

  private async existing(w: Walk, path: string, followLast: boolean): Promise<Located & { stat: Stats }> {
    const at = await w.locate(splitSandboxPath(path), followLast);
    if (!at.stat) throw new CubeError('NOT_FOUND', `'${path}' not found`);
    return { ...at, stat: at.stat };
  }

  private async statOf(h: SandboxHandle, dir: FileHandle, name: string | undefined, comps: string[], st: Stats): Promise<FileStat> {
    const target = st.isSymbolicLink() && name !== undefined ? await readlink(below(dir, name)) : undefined;
    return toFileStat(sandboxPath(comps), st, target, this.idBase(h));
  }

  stat(h: SandboxHandle, path: string): Promise<FileStat> {
    return this.within(h, async (w) => {
      const at = await this.existing(w, path, false);
      return this.statOf(h, at.dir, at.name, at.comps, at.stat);
    });
  }

  list(h: SandboxHandle, path: string, depth = 1): Promise<FileStat[]> {
    return this.within(h, async (w) => {
      const at = await this.existing(w, path, true);
      if (!at.stat.isDirectory()) throw new CubeError('BAD_REQUEST', `'${path}' is not a directory`);
      const out: FileStat[] = [];
      const walk = async (dir: FileHandle, comps: string[], level: number): Promise<void> => {
        const names = await readdir(below(dir)).catch((e: unknown) => { throw fsError(e, sandboxPath(comps)); });
        for (const name of names.sort()) {
          const child = [...comps, name];
          const st = await lstat(below(dir, name)).catch(() => undefined);
          if (!st) continue; // removed meanwhile
          out.push(await this.statOf(h, dir, name, child, st));
          if (level < depth && st.isDirectory()) {
            const sub = await w.openDir(dir, name, sandboxPath(child)).catch(() => undefined); // swapped or removed meanwhile
            if (sub) await walk(sub, child, level + 1);
          }
        }
      };
      await walk(await w.enter(at), at.comps, 1);
      return out;
    });
  }

  read(h: SandboxHandle, path: string): Promise<Readable> {
    return this.within(h, async (w) => {
      const at = await this.existing(w, path, true);
      if (!at.stat.isFile() || at.name === undefined) throw new CubeError('BAD_REQUEST', `'${path}' is not a regular file`);
      const fh = await open(below(at.dir, at.name), constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK).catch((e: unknown) => {
        throw fsError(e, path);
      });
      if (!(await fh.stat()).isFile()) {
        await fh.close();
        throw new CubeError('BAD_REQUEST', `'${path}' is not a regular file`);
      }
      return fh.createReadStream();
    });
  }

  write(h: SandboxHandle, path: string, data: Readable | Buffer, user?: string, mode?: number): Promise<FileStat> {
    const owner = this.owner(h, user);
    return this.within(h, async (w) => {
      const at = await w.locate(splitSandboxPath(path), true);
      if (!at.comps.length) throw new CubeError('BAD_REQUEST', `cannot write to '/'`);
      if (at.stat && !at.stat.isFile()) throw new CubeError('BAD_REQUEST', `'${path}' is not a regular file`);
      const name = at.name ?? at.missing.at(-1)!;
      const dir = at.missing.length > 1 ? await w.makeDirs(at.dir, at.missing.slice(0, -1), at.comps.slice(0, -at.missing.length), owner) : at.dir;
      // No O_TRUNC before the type is known (a FIFO or device swapped in must not be touched).
      const fh = await open(below(dir, name), constants.O_WRONLY | constants.O_CREAT | constants.O_NOFOLLOW | constants.O_NONBLOCK, 0o644).catch(
        (e: unknown) => { throw fsError(e, path); },
      );
      try {
        const before = await fh.stat();
        if (!before.isFile()) throw new CubeError('BAD_REQUEST', `'${path}' is not a regular file`);
        await fh.truncate(0);
        if (!at.stat) await fh.chown(owner.uid, owner.gid);
        if (mode !== undefined) await fh.chmod(mode & 0o7777);
        if (Buffer.isBuffer(data)) await fh.writeFile(data);
        else for await (const chunk of data) await fh.write(typeof chunk === 'string' ? Buffer.from(chunk) : (chunk as Buffer));
        return toFileStat(sandboxPath(at.comps), await fh.stat(), undefined, this.idBase(h));
      } catch (e) {
        throw e instanceof CubeError ? e : fsError(e, path);
      } finally {
        await fh.close();
      }
    });
  }

  mkdir(h: SandboxHandle, path: string, user?: string): Promise<boolean> {
    const owner = this.owner(h, user);
    return this.within(h, async (w) => {
      const at = await w.locate(splitSandboxPath(path), true);
      if (at.stat) {
        if (at.stat.isDirectory()) return false;
        throw new CubeError('CONFLICT', `'${path}' exists and is not a directory`);
      }
      await w.makeDirs(at.dir, at.missing, at.comps.slice(0, -at.missing.length), owner);
      return true;
    });
  }

  remove(h: SandboxHandle, path: string): Promise<void> {
    return this.within(h, async (w) => {
      const at = await this.existing(w, path, false);
      if (at.name === undefined) throw new CubeError('BAD_REQUEST', `cannot remove '/'`);
      await w.removeTree(at.dir, at.name, sandboxPath(at.comps));
    });
  }

  move(h: SandboxHandle, from: string, to: string): Promise<FileStat> {
    return this.within(h, async (w) => {
      const src = await this.existing(w, from, false);
      if (src.name === undefined) throw new CubeError('BAD_REQUEST', `cannot move '/'`);
      const dst = await w.locate(splitSandboxPath(to), false);
      if (!dst.comps.length) throw new CubeError('BAD_REQUEST', `cannot move onto '/'`);
      const name = dst.name ?? dst.missing.at(-1)!;
      const dir = dst.missing.length > 1
        ? await w.makeDirs(dst.dir, dst.missing.slice(0, -1), dst.comps.slice(0, -dst.missing.length), { uid: src.stat.uid, gid: src.stat.gid })
        : dst.dir;
      await rename(below(src.dir, src.name), below(dir, name)).catch((e: unknown) => { throw fsError(e, to); });
      const st = await lstat(below(dir, name)).catch((e: unknown) => { throw fsError(e, to); });
      return this.statOf(h, dir, name, dst.comps, st);
    });
  }
}
