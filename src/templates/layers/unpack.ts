// Unpacks one image layer (an uncompressed tar) into a directory of the layer store, hashing
// it on the way (the sha256 of the tar is the layer's OCI diff_id). Nothing lands outside the
// directory: entries with absolute or `..` paths, entries that would pass through a symlink, and
// hard links leading out are refused (the whole layer fails); device nodes and FIFOs are
// skipped (a sandbox gets its /dev from the runtime); extended attributes are dropped.
// OCI whiteouts become overlayfs ones: `.wh.NAME` -> a 0/0 character device NAME, and
// `.wh..wh..opq` -> the trusted.overlay.opaque xattr on its directory (build/cube-layer, as
// Node has neither mknod nor setxattr).
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { createWriteStream } from 'node:fs';
import { chmod, lchown, link, lutimes, mkdir, rm, statfs, symlink, unlink, utimes } from 'node:fs/promises';
import { dirname, join, posix } from 'node:path';
import { Transform, type Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { extract, type Headers } from 'tar-stream';
import { CubeError, isCubeError } from '../../errors.js';
import { nativeBinary } from '../../runtime/ns/helper.js';
import { lstatOrAbsent } from '../../fsx.js';
import { TAR_META_MAX_BYTES, tarMetaGuard } from './tar-guard.js';
import { STORE_MIN_FREE_BYTES } from '../../storage/sizes.js';

export interface UnpackResult {
  /** sha256:<hex> of the tar as read (the OCI diff_id). */
  diffID: string;
  /** Bytes of the tar. */
  tarBytes: number;
  /** Bytes of file contents written. */
  sizeBytes: number;
  entries: number;
  whiteouts: number;
  opaque: number;
  skipped: { devices: number; fifos: number; xattrs: number; other: number };
}

/** An entry's path relative to the layer root ('' for the root itself); refuses what escapes it (pure). */
export function entryPath(name: string): string {
  if (name.includes('\0')) throw new CubeError('IMAGE_INVALID', `tar entry ${JSON.stringify(name)} has a NUL in its name`);
  if (name.startsWith('/')) throw new CubeError('IMAGE_INVALID', `tar entry '${name}' is an absolute path: layer entries are relative to the layer root`);
  const n = posix.normalize(name).replace(/\/+$/, '');
  if (n === '..' || n.startsWith('../')) throw new CubeError('IMAGE_INVALID', `tar entry '${name}' escapes the layer root`);
  return n === '.' || n === '' ? '' : n;
}

export type Whiteout = { kind: 'opaque'; dir: string } | { kind: 'whiteout'; path: string } | { kind: 'ignore' };

/** What an OCI whiteout entry asks for; undefined for an ordinary entry (pure). */
export function whiteoutOf(path: string): Whiteout | undefined {
  const base = posix.basename(path);
  if (!base.startsWith('.wh.')) return undefined;
  const dir = posix.dirname(path) === '.' ? '' : posix.dirname(path);
  if (base === '.wh..wh..opq') return { kind: 'opaque', dir };
  if (base.startsWith('.wh..wh.')) return { kind: 'ignore' }; // aufs bookkeeping (.wh..wh.plnk, ...)
  const target = base.slice(4);
  if (target === '' || target === '.' || target === '..') throw new CubeError('IMAGE_INVALID', `whiteout entry '${path}' names no file`);
  return { kind: 'whiteout', path: dir ? `${dir}/${target}` : target };
}

/** Bytes an entry takes besides its contents (inode, directory entry): as layerBytes (tree.ts) counts them, so a flood of empty files is bounded too. */
const ENTRY_BYTES = 4096;
/** Bytes unpacked between two looks at the store's free space (and before any file this large). */
const FREE_CHECK_BYTES = 16 * 1024 ** 2;

/**
 * What one import (an upload, a registry pull, a fetch from a peer: all its layers) may unpack:
 * at most `limitBytes` (cubelet.storage.layer_unpack_max_gib), and never so much that the store
 * holding the layers keeps less than `reserveBytes` free. Charged per entry from its tar header
 * before a byte of it is written, the free space read again every FREE_CHECK_BYTES, so a
 * decompression bomb (a 2.1 MB upload that unpacked to 2 GB on the host's root filesystem) stops
 * at the bound, not at a full disk, whatever else fills the store meanwhile.
 */
export class UnpackBudget {
  private used = 0;
  private unchecked = 0;

  constructor(
    readonly limitBytes: number,
    private readonly reserveBytes = STORE_MIN_FREE_BYTES,
  ) {}

  /** Charges `bytes` about to be written under `dir`: 413 LAYER_TOO_LARGE over the limit, 503 STORE_FULL over the free space. */
  async charge(bytes: number, dir: string, what: string): Promise<void> {
    this.used += bytes;
    if (this.used > this.limitBytes)
      throw new CubeError(
        'LAYER_TOO_LARGE',
        `${what}: more than ${gib(this.limitBytes)} GiB for one import (cubelet.storage.layer_unpack_max_gib): refused, nothing kept`,
        { details: { limitBytes: this.limitBytes } },
      );
    this.unchecked += bytes;
    if (this.unchecked < FREE_CHECK_BYTES && bytes < FREE_CHECK_BYTES) return;
    const st = await statfs(dir);
    const free = st.bavail * st.bsize;
    if (free - this.unchecked < this.reserveBytes)
      throw new CubeError(
        'STORE_FULL',
        `${what} does not fit the layer store: ${gib(free)} GiB free, ${gib(this.reserveBytes)} GiB kept for the sandboxes; refused at ${gib(this.used)} GiB, nothing kept`,
        { retryAfter: 60, details: { freeBytes: free, usedBytes: this.used } },
      );
    this.unchecked = 0;
  }
}

const gib = (b: number) => (b / 1024 ** 3).toFixed(2);

/** Unpacks the tar `input` into `root` (an empty directory that exists), charging `budget` for what it writes. */
export async function unpackLayer(
  input: Readable,
  root: string,
  budget: UnpackBudget,
  opts: { layerTool?: string; what?: string } = {},
): Promise<UnpackResult> {
  const hash = createHash('sha256');
  const r: UnpackResult = {
    diffID: '',
    tarBytes: 0,
    sizeBytes: 0,
    entries: 0,
    whiteouts: 0,
    opaque: 0,
    skipped: { devices: 0, fifos: 0, xattrs: 0, other: 0 },
  };
  const hasher = new Transform({
    transform(chunk: Buffer, _enc, cb) {
      hash.update(chunk);
      r.tarBytes += chunk.length;
      cb(null, chunk);
    },
  });
  const ex = extract();
  const u = new Unpacker(root, budget, opts.what ?? 'the layer');
  const feeding = pipeline(input, hasher, tarMetaGuard(TAR_META_MAX_BYTES, 'a layer'), ex);
  feeding.catch(() => undefined); // reported below, after the entries loop ends
  try {
    for await (const entry of ex) {
      r.entries++;
      await u.entry(entry.header, entry, r);
      entry.resume(); // whatever the handler did not read
    }
    await feeding;
  } catch (e) {
    ex.destroy();
    await feeding.catch(() => undefined); // the entry's error (e) is the one thrown; the feed's follows from it
    if (isCubeError(e)) throw e;
    const err = e as NodeJS.ErrnoException;
    if (err.code === 'ENOSPC' || err.code === 'EDQUOT') throw new CubeError('STORE_FULL', `layer store full while unpacking: ${err.message}`, { cause: e });
    if (err.code && ARCHIVE_ERRNOS.has(err.code))
      throw new CubeError('IMAGE_INVALID', `a layer entry the filesystem refuses: ${err.message.replace(root, '<layer>')}`, { cause: e });
    if (err.code && /^E[A-Z]+$/.test(err.code) && err.syscall) throw e; // a host error, not the archive's
    throw new CubeError('IMAGE_INVALID', `corrupt or truncated layer tar: ${err.message}`, { cause: e });
  }
  const ops = u.overlayOps();
  if (ops.length) await runLayerTool(opts.layerTool ?? nativeBinary('cube-layer'), root, ops);
  await u.finish();
  r.diffID = `sha256:${hash.digest('hex')}`;
  return r;
}

/**
 * Errors the filesystem gives for what an archive asks (a name over 255 bytes, a path over 4096, a
 * link target of 4096, a hard link to itself or to an entry replaced since): the archive's fault,
 * answered 400. Others (EIO, EMFILE, ...) are the host's.
 */
const ARCHIVE_ERRNOS = new Set(['ENAMETOOLONG', 'ENOENT', 'EEXIST', 'ENOTDIR', 'EISDIR', 'ELOOP', 'EINVAL', 'EMLINK', 'ENOTEMPTY', 'EFBIG']);

class Unpacker {
  /** Directories of this layer checked to be real directories (no symlink on the way). */
  private readonly dirs = new Set<string>(['']);
  private readonly dirTimes: [string, Date][] = [];
  /**
   * The overlayfs marks to make once every entry is in (cube-layer): a whiteout ('w') or an opaque
   * directory ('o') by path, as the entries so far leave them. A later entry at a whited-out path
   * (or below it) replaces the whiteout, and a whiteout or a replacement of a directory drops the
   * marks below it: tar semantics, the later entry wins (before, a mark left for a path that a later
   * entry changed failed cube-layer: a 500).
   */
  private readonly marks = new Map<string, 'w' | 'o'>();

  constructor(
    private readonly root: string,
    private readonly budget: UnpackBudget,
    private readonly what: string,
  ) {}

  /** cube-layer's operations for the marks (see runLayerTool). */
  overlayOps(): string[] {
    return [...this.marks].map(([path, op]) => `${op}${path}`);
  }

  /** `path` now exists (made by an entry, or as a parent of one): no whiteout of it or of a directory above it stays. */
  private exists(path: string): void {
    for (let p = path; p; p = p.includes('/') ? p.slice(0, p.lastIndexOf('/')) : '') if (this.marks.get(p) === 'w') this.marks.delete(p);
  }

  /** What was at `path` is gone: so are the marks at and below it. */
  private gone(path: string): void {
    for (const p of this.marks.keys()) if (p === path || p.startsWith(`${path}/`)) this.marks.delete(p);
  }

  private abs(rel: string): string {
    return rel ? join(this.root, rel) : this.root;
  }

  async entry(h: Headers, body: Readable, r: UnpackResult): Promise<void> {
    const path = entryPath(h.name);
    const pax = (h as Headers & { pax?: Record<string, string> }).pax; // set by tar-stream, not in its types
    if (pax && Object.keys(pax).some((k) => k.startsWith('SCHILY.xattr.') || k.startsWith('LIBARCHIVE.xattr.'))) r.skipped.xattrs++;
    const wh = path ? whiteoutOf(path) : undefined;
    if (wh) {
      if (wh.kind === 'ignore') return;
      if (wh.kind === 'opaque') {
        await this.mkdirs(wh.dir);
        this.exists(wh.dir);
        this.marks.set(wh.dir, 'o');
        r.opaque++;
      } else {
        await this.parents(wh.path);
        await this.removeExisting(wh.path);
        this.exists(posix.dirname(wh.path) === '.' ? '' : posix.dirname(wh.path));
        this.gone(wh.path);
        this.marks.set(wh.path, 'w');
        r.whiteouts++;
      }
      return;
    }
    const type = h.type ?? 'file';
    if (type === 'character-device' || type === 'block-device') return void r.skipped.devices++;
    if (type === 'fifo') return void r.skipped.fifos++;
    if (!['file', 'contiguous-file', 'directory', 'symlink', 'link'].includes(type)) return void r.skipped.other++;
    if (path === '' && type !== 'directory') throw new CubeError('IMAGE_INVALID', `tar entry '${h.name}' (${type}) would replace the layer root`);
    await this.budget.charge(ENTRY_BYTES + (type === 'file' || type === 'contiguous-file' ? (h.size ?? 0) : 0), this.root, this.what);
    await this.parents(path);
    this.exists(path);
    const abs = this.abs(path);
    const mode = (h.mode ?? 0o644) & 0o7777;
    switch (type) {
      case 'directory': {
        const st = await lstatOrAbsent(abs);
        if (st && !st.isDirectory()) await this.removeExisting(path);
        if (!st?.isDirectory()) await mkdir(abs);
        await chmod(abs, mode);
        await lchown(abs, h.uid ?? 0, h.gid ?? 0);
        this.dirs.add(path);
        if (h.mtime) this.dirTimes.push([abs, h.mtime]);
        return;
      }
      case 'file':
      case 'contiguous-file': {
        await this.removeExisting(path);
        // 'wx' = O_CREAT|O_EXCL: never follows a symlink that appeared at the path.
        await pipeline(body, createWriteStream(abs, { flags: 'wx', mode: 0o600 }));
        r.sizeBytes += h.size ?? 0;
        await lchown(abs, h.uid ?? 0, h.gid ?? 0);
        await chmod(abs, mode); // after chown, which clears setuid bits
        if (h.mtime) await utimes(abs, h.mtime, h.mtime);
        return;
      }
      case 'symlink': {
        // Kept as written: it resolves inside the sandbox's root at run time and is never followed here.
        await this.removeExisting(path);
        await symlink(h.linkname ?? '', abs);
        await lchown(abs, h.uid ?? 0, h.gid ?? 0);
        if (h.mtime) await lutimes(abs, h.mtime, h.mtime);
        return;
      }
      case 'link': {
        let target: string;
        try {
          target = entryPath(h.linkname ?? '');
        } catch {
          throw new CubeError('IMAGE_INVALID', `hard link '${h.name}' points outside the layer ('${h.linkname}')`);
        }
        if (!target) throw new CubeError('IMAGE_INVALID', `hard link '${h.name}' points at the layer root`);
        if (target === path) throw new CubeError('IMAGE_INVALID', `hard link '${h.name}' points at itself`);
        await this.parents(target, false);
        const st = await lstatOrAbsent(this.abs(target));
        if (!st) throw new CubeError('IMAGE_INVALID', `hard link '${h.name}' points at '${h.linkname}', which is not in the layer before it`);
        if (st.isDirectory()) throw new CubeError('IMAGE_INVALID', `hard link '${h.name}' points at the directory '${h.linkname}'`);
        await this.removeExisting(path);
        await link(this.abs(target), abs);
        return;
      }
      default:
        return; // every other type was counted as skipped above
    }
  }

  /** Makes sure every ancestor of `path` is a real directory of this layer (created when `create`). */
  private async parents(path: string, create = true): Promise<void> {
    const parts = path.split('/');
    let prefix = '';
    for (let i = 0; i < parts.length - 1; i++) {
      prefix = prefix ? `${prefix}/${parts[i]}` : parts[i]!;
      if (this.dirs.has(prefix)) continue;
      const st = await lstatOrAbsent(this.abs(prefix));
      if (!st) {
        if (!create) throw new CubeError('IMAGE_INVALID', `'${path}' is not in the layer`);
        await mkdir(this.abs(prefix), { mode: 0o755 });
      } else if (st.isSymbolicLink()) {
        throw new CubeError('IMAGE_INVALID', `tar entry '${path}' passes through the symlink '${prefix}'`);
      } else if (!st.isDirectory()) {
        throw new CubeError('IMAGE_INVALID', `tar entry '${path}' is under '${prefix}', which is not a directory`);
      }
      this.dirs.add(prefix);
    }
  }

  private async mkdirs(dir: string): Promise<void> {
    if (!dir) return;
    await this.parents(`${dir}/x`);
  }

  /** Clears `path` for a new entry (tar semantics: a later entry replaces an earlier one). */
  private async removeExisting(path: string): Promise<void> {
    const abs = this.abs(path);
    const st = await lstatOrAbsent(abs);
    if (!st) return;
    this.gone(path);
    if (st.isDirectory()) {
      await rm(abs, { recursive: true, force: true });
      for (const d of this.dirs) if (d === path || d.startsWith(`${path}/`)) this.dirs.delete(d);
    } else {
      await unlink(abs);
    }
  }

  /** Directory times last: every entry written into a directory changed its mtime. */
  async finish(): Promise<void> {
    // Times are cosmetic for a layer (nothing reads a directory's mtime to decide): best effort.
    for (const [abs, t] of this.dirTimes.reverse()) await utimes(abs, t, t).catch(() => undefined);
  }
}

/** Runs build/cube-layer on `root` with `ops` (see native/cube-layer.c); returns its stdout (the answers to 'q' ops). */
export async function runLayerTool(tool: string, root: string, ops: string[]): Promise<string> {
  const child = spawn(tool, [root], { stdio: ['pipe', 'pipe', 'pipe'] });
  let stderr = '';
  let stdout = '';
  child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
  const done = new Promise<number>((resolve, reject) => {
    child.once('error', reject);
    child.once('close', (code) => resolve(code ?? 1));
  });
  child.stdin.end(Buffer.from(ops.map((o) => `${o}\0`).join('')));
  const code = await done.catch((e: Error) => {
    throw new CubeError('INTERNAL', `${tool}: ${e.message} (build it with 'npm run build:native')`, { cause: e });
  });
  if (code !== 0) throw new CubeError('INTERNAL', `cube-layer failed on ${dirname(root)}: ${stderr.trim() || `exit ${code}`}`);
  return stdout;
}
