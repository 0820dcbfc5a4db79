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
// The same walk serves volumes' content API (src/runtime/ns/volumes.ts): a FileTree names the
// root it starts from (a volume's directory in the store) instead of a sandbox's /proc/<init>/root.
import { constants } from 'node:fs';
import { lchown, lstat, mkdir, open, readdir, readlink, rename, rmdir, unlink } from 'node:fs/promises';
import type { FileHandle } from 'node:fs/promises';
import type { Stats } from 'node:fs';
import type { Readable } from 'node:stream';
import { CubeError } from '../../errors.js';
import { SANDBOX_USERS, sandboxUser } from '../../templates/store.js';
import type { FileAccess, FileStat, SandboxFiles, SandboxHandle } from '../types.js';
import { ID_RANGE } from './ids.js';
import { lstatSyncOrAbsent } from '../../fsx.js';

const MAX_LINKS = 40;
const VIRTUAL_ROOTS = new Set(['proc', 'dev', 'sys']);
/** Linux O_PATH (not in Node's constants): a handle that only anchors lookups, needs no read permission. */
const O_PATH = 0o10000000;
const DIR_HANDLE = O_PATH | constants.O_DIRECTORY | constants.O_NOFOLLOW;

/** Linux's NAME_MAX and PATH_MAX (bytes): longer names the kernel refuses with ENAMETOOLONG. */
const NAME_MAX = 255;
const PATH_MAX = 4096;

/** Components of a path inside the sandbox; relative paths start at `home` (/home/user); `..` is refused (pure). */
export function splitSandboxPath(path: string, home: string = SANDBOX_USERS.user.home): string[] {
  if (typeof path !== 'string' || path === '' || path.includes('\0')) throw new CubeError('BAD_REQUEST', `invalid path '${path}'`);
  const abs = path.startsWith('/') ? path : `${home}/${path}`;
  const comps = abs.split('/').filter((c) => c !== '' && c !== '.');
  if (comps.includes('..')) throw new CubeError('BAD_REQUEST', `path '${path}' contains '..'`);
  const long = comps.find((c) => Buffer.byteLength(c) > NAME_MAX);
  if (long !== undefined) throw new CubeError('BAD_REQUEST', `a name of ${Buffer.byteLength(long)} bytes in '${shorten(path)}': at most ${NAME_MAX}`);
  if (Buffer.byteLength(abs) >= PATH_MAX)
    throw new CubeError('BAD_REQUEST', `a path of ${Buffer.byteLength(abs)} bytes ('${shorten(path)}'): at most ${PATH_MAX - 1}`);
  return comps;
}

/** A path cut for a message (pure). */
const shorten = (p: string): string => (p.length > 80 ? `${p.slice(0, 77)}...` : p);

export function sandboxPath(comps: string[]): string {
  return '/' + comps.join('/');
}

/** The host path of `name` below the held directory `dir` (one component, never followed by the caller's flags). */
function below(dir: FileHandle, name?: string): string {
  return name === undefined ? `/proc/self/fd/${dir.fd}` : `/proc/self/fd/${dir.fd}/${name}`;
}

/** Linux's EDQUOT, which libuv has no name for (its code reads 'Unknown system error -122'). */
const EDQUOT_ERRNO = -122;

/** A file operation's error as the API answers it: the caller's input or the sandbox's state (4xx), or the host's fault (500). */
function fsError(e: unknown, path: string): CubeError {
  if (e instanceof CubeError) return e;
  const err = e as NodeJS.ErrnoException;
  const code = err.errno === EDQUOT_ERRNO ? 'EDQUOT' : err.code;
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
      return new CubeError('BAD_REQUEST', `no space left for '${path}' (the sandbox's disk is full)`, { cause: e });
    case 'ENAMETOOLONG':
      return new CubeError('BAD_REQUEST', `'${shorten(path)}': a name or path too long`, { cause: e });
    case 'EACCES':
    case 'EPERM':
      return new CubeError('BAD_REQUEST', `'${path}': ${code === 'EPERM' ? 'Operation not permitted' : 'Permission denied'}`, { cause: e });
    case 'EXDEV':
      return new CubeError('BAD_REQUEST', `'${path}': cannot be moved across filesystems of the sandbox (a mount inside it)`, { cause: e });
    case 'EBUSY':
    case 'ETXTBSY':
      return new CubeError('CONFLICT', `'${path}' is in use (a mount point or a running program)`, { cause: e });
    case 'EINVAL':
    case 'EMLINK':
    case 'EFBIG':
    case 'EOVERFLOW':
      return new CubeError('BAD_REQUEST', `'${path}': ${err.message}`, { cause: e });
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
    atime: st.atime,
    ctime: st.ctime,
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

/**
 * Where a walk starts and how its paths read: a sandbox's root (the default), or a volume's
 * directory, whose relative paths start at its root and which has no virtual filesystems.
 */
export interface FileTree {
  /** The host path of the tree's root for `h`. */
  root(h: SandboxHandle): string;
  /** What the tree is, for messages ('the sandbox', 'volume vol-...'). */
  name(h: SandboxHandle): string;
  /** Where relative paths start. */
  home: string;
  /** /proc, /dev and /sys at the root are listed, never entered (a sandbox's). */
  virtualRoots: boolean;
}

export const SANDBOX_TREE: FileTree = {
  root: (h) => `/proc/${h.initPid}/root`,
  name: () => 'the sandbox',
  home: SANDBOX_USERS.user.home,
  virtualRoots: true,
};

/** One file operation: the directory handles it opened, all closed by `close()`. */
class Walk {
  private readonly held: FileHandle[] = [];

  private constructor(
    readonly root: FileHandle,
    private readonly what: string,
    private readonly virtual: boolean,
  ) {
    this.held.push(root);
  }

  /** Opens the tree's root; `alive` is asked after the open, whose handle pins that process's root even if the pid were reused later. */
  static async start(h: SandboxHandle, alive: (h: SandboxHandle) => boolean, tree: FileTree): Promise<Walk> {
    const gone = () => new CubeError('NOT_FOUND', tree === SANDBOX_TREE ? `sandbox ${h.sandboxID} is not running` : `${tree.name(h)} is not there`);
    if (!alive(h)) throw gone();
    const root = await open(tree.root(h), O_PATH | constants.O_DIRECTORY).catch(() => {
      throw gone();
    });
    const walk = new Walk(root, tree.name(h), tree.virtualRoots);
    if (!alive(h)) {
      await walk.close();
      throw gone();
    }
    return walk;
  }

  async close(): Promise<void> {
    // Closing read-only handles cannot lose data; an error here has nobody to go to.
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
    const escape = () => new CubeError('BAD_REQUEST', `path '${shown}' leads out of ${this.what}`);
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
      if (this.virtual && !stack.length && VIRTUAL_ROOTS.has(c)) throw new CubeError('BAD_REQUEST', `'/${c}' is not accessible through the files API`);
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
    for (const child of await readdir(below(sub)).catch((e: unknown) => {
      throw fsError(e, path);
    })) {
      await this.removeTree(sub, child, `${path}/${child}`).catch((e: unknown) => {
        if (!(e instanceof CubeError && e.kind === 'NOT_FOUND')) throw e;
      });
    }
    await rmdir(below(dir, name)).catch((e: unknown) => {
      if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw fsError(e, path);
    });
  }
}

/** What a user must be allowed for a files-API call (native/launch/files.c check_access): access(2) bits and the helper's own. */
export const MAY = { READ: 4, WRITE: 2, SEARCH: 1, UNLINK: 8, TREE: 16, SOFT: 32 } as const;
/** [MAY bits, path inside the sandbox]. */
export type AccessCheck = [number, string];

/**
 * Entries one listing answers at most, held in memory and sent in one message: a depth-2 listing
 * of `/` walked the whole root filesystem (the host's /usr too, for the host template).
 */
const MAX_LISTED = 100_000;
const LSTAT_RUN = 256; // entries lstat'ed synchronously per turn of the event loop: awaited, 100,000 cost cubed 7.95 s of CPU (benchmarks.md, Session 18)

/** Paths by their components, as a depth-first walk meets them (pure). */
function compareComps(a: string[], b: string[]): number {
  for (let i = 0; i < Math.min(a.length, b.length); i++) if (a[i] !== b[i]) return a[i]! < b[i]! ? -1 : 1;
  return a.length - b.length;
}

/** The directory holding `comps` ('/' for a top-level entry) (pure). */
const parentOf = (comps: string[]): string => sandboxPath(comps.slice(0, -1));

export class NsFiles implements SandboxFiles {
  /**
   * `alive` tells that initPid is still this sandbox's init: a reused pid would be a host process's root.
   * `idBase`: the first host id of the sandbox's own range, undefined when its ids are the host's.
   */
  constructor(
    private readonly alive: (h: SandboxHandle) => boolean,
    private readonly idBase: (h: SandboxHandle) => number | undefined,
    /** Asks the kernel, in the sandbox as `user`, for each check; throws the first refusal, returns the indexes of SOFT ones refused. */
    private readonly mayAccess?: (h: SandboxHandle, user: string, checks: AccessCheck[]) => Promise<number[]>,
    private readonly tree: FileTree = SANDBOX_TREE,
  ) {}

  private split(path: string): string[] {
    return splitSandboxPath(path, this.tree.home);
  }

  /**
   * With `as.permissions` and a user other than root: whether the user may do what `checks` say,
   * asked of the kernel in the sandbox as that user (a helper job: native/launch/files.c
   * check_access, one per call, so only the files API's calls as a user pay it). The walk and the
   * operation itself run as host root (below). Paths of files that exist are given as the caller
   * named them, so the kernel also checks the directories a symlink on the way passes through;
   * where something is created, the deepest existing directory of the walk (where it lands).
   * Returns the SOFT checks refused.
   */
  private async allowed(h: SandboxHandle, user: string | undefined, as: FileAccess | undefined, checks: AccessCheck[]): Promise<number[]> {
    const name = user ?? 'user';
    if (!as?.permissions || !this.mayAccess || sandboxUser(name).uid === 0 || checks.length === 0) return [];
    return this.mayAccess(h, name, checks);
  }

  /** Whether `user` may create `at`'s missing components (or replace it when it exists). */
  private mayWrite(h: SandboxHandle, path: string, user: string | undefined, at: Located, as: FileAccess | undefined): Promise<number[]> {
    const deepest = at.comps.slice(0, at.comps.length - at.missing.length);
    return this.allowed(h, user, as, [at.stat ? [MAY.WRITE, sandboxPath(this.split(path))] : [MAY.WRITE | MAY.SEARCH, sandboxPath(deepest)]]);
  }

  /** The host ids files of `user` get in `h` (created from here, as host root, then chowned). */
  private owner(h: SandboxHandle, user: string | undefined): { uid: number; gid: number } {
    const u = sandboxUser(user);
    const base = this.idBase(h) ?? 0;
    return { uid: base + u.uid, gid: base + u.gid };
  }

  /**
   * Runs `fn` with a walk of `h`'s root, closing every handle it opened afterwards. An error the
   * operation did not name (a file changed under it) is answered as fsError says, never raw.
   */
  private async within<T>(h: SandboxHandle, path: string, fn: (w: Walk) => Promise<T>): Promise<T> {
    const w = await Walk.start(h, this.alive, this.tree);
    try {
      return await fn(w);
    } catch (e) {
      throw fsError(e, path);
    } finally {
      await w.close();
    }
  }

  private async existing(w: Walk, path: string, followLast: boolean): Promise<Located & { stat: Stats }> {
    const at = await w.locate(this.split(path), followLast);
    if (!at.stat) throw new CubeError('NOT_FOUND', `'${path}' not found`);
    return { ...at, stat: at.stat };
  }

  private async statOf(h: SandboxHandle, dir: FileHandle, name: string | undefined, comps: string[], st: Stats): Promise<FileStat> {
    // A link gone or replaced since its lstat (the sandbox changes its files as it likes) is shown without its target.
    const target = st.isSymbolicLink() && name !== undefined ? await readlink(below(dir, name)).catch(() => undefined) : undefined;
    return toFileStat(sandboxPath(comps), st, target, this.idBase(h));
  }

  async stat(h: SandboxHandle, path: string, user?: string, as?: FileAccess): Promise<FileStat> {
    const comps = this.split(path);
    return this.within(h, path, async (w) => {
      // lstat needs only the way there: every directory on it searchable.
      if (comps.length) await this.allowed(h, user, as, [[MAY.SEARCH, parentOf(comps)]]);
      const at = await this.existing(w, path, false);
      return this.statOf(h, at.dir, at.name, at.comps, at.stat);
    });
  }

  list(h: SandboxHandle, path: string, depth = 1, user?: string, as?: FileAccess): Promise<FileStat[]> {
    return this.within(h, path, async (w) => {
      await this.allowed(h, user, as, [[MAY.READ | MAY.SEARCH, sandboxPath(this.split(path))]]);
      const at = await this.existing(w, path, true);
      if (!at.stat.isDirectory()) throw new CubeError('BAD_REQUEST', `'${path}' is not a directory`);
      const out: { comps: string[]; stat: FileStat }[] = [];
      // One level at a time, so the user's permission for all of a level's directories is one question.
      let level: { dir: FileHandle; comps: string[] }[] = [{ dir: await w.enter(at), comps: at.comps }];
      for (let n = 1; level.length; n++) {
        const next: { dir: FileHandle; comps: string[] }[] = [];
        for (const { dir, comps } of level) {
          const names = await readdir(below(dir)).catch((e: unknown) => {
            throw fsError(e, sandboxPath(comps));
          });
          for (const [i, name] of names.sort().entries()) {
            if (i > 0 && i % LSTAT_RUN === 0) await new Promise((r) => setImmediate(r));
            const child = [...comps, name];
            const st = lstatSyncOrAbsent(below(dir, name));
            if (!st) continue; // removed meanwhile
            out.push({ comps: child, stat: await this.statOf(h, dir, name, child, st) });
            if (out.length > MAX_LISTED)
              throw new CubeError(
                'BAD_REQUEST',
                `'${path}' holds more than ${MAX_LISTED} entries within depth ${depth}: list fewer levels, or a directory below it`,
              );
            // /proc, /dev and /sys are listed as names, never entered (not reachable through the files API).
            if (n < depth && st.isDirectory() && !(this.tree.virtualRoots && child.length === 1 && VIRTUAL_ROOTS.has(name))) {
              const sub = await w.openDir(dir, name, sandboxPath(child)).catch(() => undefined); // swapped or removed meanwhile
              if (sub) next.push({ dir: sub, comps: child });
            }
          }
        }
        const refused = new Set(
          await this.allowed(
            h,
            user,
            as,
            next.map((d) => [MAY.READ | MAY.SEARCH | MAY.SOFT, sandboxPath(d.comps)]),
          ),
        );
        level = next.filter((_, i) => !refused.has(i));
      }
      // Depth first, each directory's names in order (as a recursive walk and envd's list them).
      return out.sort((a, b) => compareComps(a.comps, b.comps)).map((e) => e.stat);
    });
  }

  read(h: SandboxHandle, path: string, user?: string, as?: FileAccess): Promise<Readable> {
    return this.within(h, path, async (w) => {
      await this.allowed(h, user, as, [[MAY.READ, sandboxPath(this.split(path))]]);
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

  write(h: SandboxHandle, path: string, data: Readable | Buffer, user?: string, mode?: number, as?: FileAccess): Promise<FileStat> {
    const owner = this.owner(h, user);
    return this.within(h, path, async (w) => {
      const at = await w.locate(this.split(path), true);
      if (!at.comps.length) throw new CubeError('BAD_REQUEST', `cannot write to '/'`);
      if (at.stat && !at.stat.isFile()) throw new CubeError('BAD_REQUEST', `'${path}' is not a regular file`);
      await this.mayWrite(h, path, user, at, as);
      const name = at.name ?? at.missing.at(-1)!;
      const dir = at.missing.length > 1 ? await w.makeDirs(at.dir, at.missing.slice(0, -1), at.comps.slice(0, -at.missing.length), owner) : at.dir;
      // No O_TRUNC before the type is known (a FIFO or device swapped in must not be touched).
      const fh = await open(below(dir, name), constants.O_WRONLY | constants.O_CREAT | constants.O_NOFOLLOW | constants.O_NONBLOCK, 0o644).catch(
        (e: unknown) => {
          throw fsError(e, path);
        },
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

  mkdir(h: SandboxHandle, path: string, user?: string, as?: FileAccess): Promise<boolean> {
    const owner = this.owner(h, user);
    return this.within(h, path, async (w) => {
      const at = await w.locate(this.split(path), true);
      if (at.stat) {
        if (at.stat.isDirectory()) return false;
        throw new CubeError('CONFLICT', `'${path}' exists and is not a directory`);
      }
      await this.mayWrite(h, path, user, at, as);
      await w.makeDirs(at.dir, at.missing, at.comps.slice(0, -at.missing.length), owner);
      return true;
    });
  }

  async remove(h: SandboxHandle, path: string, user?: string, as?: FileAccess): Promise<void> {
    const comps = this.split(path);
    if (!comps.length) throw new CubeError('BAD_REQUEST', `cannot remove '/'`);
    return this.within(h, path, async (w) => {
      await this.allowed(h, user, as, [[MAY.UNLINK | MAY.TREE, sandboxPath(comps)]]);
      const at = await this.existing(w, path, false);
      if (at.name === undefined) throw new CubeError('BAD_REQUEST', `cannot remove '/'`);
      await w.removeTree(at.dir, at.name, sandboxPath(at.comps));
    });
  }

  /**
   * Sets the owner (ids inside, as `user` names them) and mode of `path`, through a handle opened
   * without following a link (a link is refused: its target could be anywhere).
   */
  setOwnerMode(h: SandboxHandle, path: string, meta: { uid?: number; gid?: number; mode?: number }): Promise<FileStat> {
    return this.within(h, path, async (w) => {
      const at = await this.existing(w, path, false);
      if (at.stat.isSymbolicLink()) throw new CubeError('BAD_REQUEST', `'${path}' is a symlink: its owner and mode are not set`);
      // The root is the held directory itself (its /proc/self/fd link is ours, safe to follow).
      const flags = at.name === undefined ? constants.O_RDONLY | constants.O_DIRECTORY : constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK;
      const fh = await open(at.name === undefined ? below(at.dir) : below(at.dir, at.name), flags);
      try {
        const base = this.idBase(h) ?? 0;
        if (meta.uid !== undefined || meta.gid !== undefined) {
          const st = await fh.stat();
          await fh.chown(meta.uid === undefined ? st.uid : base + meta.uid, meta.gid === undefined ? st.gid : base + meta.gid);
        }
        if (meta.mode !== undefined) await fh.chmod(meta.mode & 0o7777);
        return toFileStat(sandboxPath(at.comps), await fh.stat(), undefined, this.idBase(h));
      } finally {
        await fh.close();
      }
    });
  }

  move(h: SandboxHandle, from: string, to: string, user?: string, as?: FileAccess): Promise<FileStat> {
    return this.within(h, from, async (w) => {
      const src = await this.existing(w, from, false);
      if (src.name === undefined) throw new CubeError('BAD_REQUEST', `cannot move '/'`);
      const dst = await w.locate(this.split(to), false);
      if (!dst.comps.length) throw new CubeError('BAD_REQUEST', `cannot move onto '/'`);
      const fromPath = sandboxPath(this.split(from));
      const checks: AccessCheck[] = [[MAY.UNLINK, fromPath]];
      // rename(2): the destination's directory, an entry replaced there as if removed, and a directory
      // changing parent must be writable itself (its `..` changes).
      checks.push(
        dst.stat ? [MAY.UNLINK, sandboxPath(this.split(to))] : [MAY.WRITE | MAY.SEARCH, sandboxPath(dst.comps.slice(0, dst.comps.length - dst.missing.length))],
      );
      if (src.stat.isDirectory() && parentOf(src.comps) !== parentOf(dst.comps)) checks.push([MAY.WRITE, fromPath]);
      await this.allowed(h, user, as, checks);
      const name = dst.name ?? dst.missing.at(-1)!;
      const owner = as?.permissions ? this.owner(h, user) : { uid: src.stat.uid, gid: src.stat.gid };
      const dir = dst.missing.length > 1 ? await w.makeDirs(dst.dir, dst.missing.slice(0, -1), dst.comps.slice(0, -dst.missing.length), owner) : dst.dir;
      await rename(below(src.dir, src.name), below(dir, name)).catch((e: unknown) => {
        throw fsError(e, to);
      });
      const st = await lstat(below(dir, name)).catch((e: unknown) => {
        throw fsError(e, to);
      });
      return this.statOf(h, dir, name, dst.comps, st);
    });
  }
}
