// The ns runtime's volumes (E2B volumes): a btrfs subvolume each in `<store>/volumes/<id>`, its
// quota group limited to the volume's size, so a writer (the content API or a sandbox that
// mounts it) gets EDQUOT at the limit and the store never fills past it. The content API walks a
// volume as the files API walks a sandbox (files.ts: one component at a time below a held
// directory, symlinks resolved inside the volume, `..` refused), so no path or link reaches
// outside it. Files keep the ids a sandbox's files have on disk (root 0, user 1000): the launch
// helper mounts a volume idmapped into each sandbox (native/cube-launch.c, volumes), where they
// are that sandbox's root and user, whatever its host id range.
import { CubeError, isCubeError } from '../../errors.js';
import { isVolumeID } from '../../ids.js';
import { join } from 'node:path';
import type { Readable } from 'node:stream';
import type { BtrfsStore } from '../../storage/btrfs-store.js';
import { STORE_MIN_FREE_BYTES } from '../../storage/sizes.js';
import { SANDBOX_USERS } from '../../templates/store.js';
import { mountPathProblem } from '../../model/volume.js';
import type { FileStat, SandboxHandle, VolumeHost, VolumeWriteOptions } from '../types.js';
import { NsFiles, splitSandboxPath, type FileTree } from './files.js';

const MIB = 1024 ** 2;
/** Linux's EDQUOT (libuv has no name for it). */
const EDQUOT_ERRNO = -122;

/** Ids a volume's files may be given: those a sandbox maps (0-65535). */
const MAX_ID = 65_535;

export class NsVolumes implements VolumeHost {
  private readonly files: NsFiles;
  /** Subvolume ids (their quota groups), learnt on first use. */
  private readonly subvolumes = new Map<string, number>();

  constructor(private readonly store: BtrfsStore) {
    const tree: FileTree = {
      root: (h) => this.dir(h.sandboxID),
      name: (h) => `volume ${h.sandboxID}`,
      home: '/',
      virtualRoots: false,
    };
    this.files = new NsFiles(
      () => true,
      () => undefined,
      undefined,
      tree,
    );
  }

  dir(volumeID: string): string {
    if (!isVolumeID(volumeID)) throw new CubeError('BAD_REQUEST', `invalid volume id ${JSON.stringify(volumeID)}`);
    return join(this.store.volumesDir, volumeID);
  }

  async create(volumeID: string, sizeBytes: number): Promise<void> {
    this.dir(volumeID);
    const u = await this.store.usage();
    const room = u.freeBytes - STORE_MIN_FREE_BYTES;
    if (sizeBytes > room)
      throw new CubeError(
        'VOLUME_TOO_LARGE',
        `a volume of ${Math.floor(sizeBytes / MIB)} MiB does not fit: the store ${u.path} has ${Math.max(0, Math.floor(room / MIB))} MiB free (beyond the ${Math.floor(STORE_MIN_FREE_BYTES / MIB)} MiB it keeps)`,
      );
    const user = SANDBOX_USERS.user;
    this.subvolumes.set(volumeID, await this.store.makeVolume(volumeID, sizeBytes, { uid: user.uid, gid: user.gid }));
  }

  async remove(volumeID: string): Promise<void> {
    this.dir(volumeID);
    await this.store.removeVolume(volumeID);
    this.subvolumes.delete(volumeID);
  }

  async ids(): Promise<string[]> {
    return (await this.store.volumeNames()).filter(isVolumeID);
  }

  async usedBytes(volumeID: string): Promise<number | undefined> {
    let sub = this.subvolumes.get(volumeID);
    if (sub === undefined) {
      sub = (await this.store.subvolumeIDs([this.dir(volumeID)]))[0] ?? 0;
      if (sub <= 0) return undefined;
      this.subvolumes.set(volumeID, sub);
    }
    return this.store.exclusiveBytes(sub);
  }

  statPath(volumeID: string, path: string): Promise<FileStat> {
    return this.op(volumeID, path, (h) => this.files.stat(h, path));
  }

  listDir(volumeID: string, path: string, depth: number): Promise<FileStat[]> {
    return this.op(volumeID, path, (h) => this.files.list(h, path, depth));
  }

  readFile(volumeID: string, path: string): Promise<Readable> {
    return this.op(volumeID, path, (h) => this.files.read(h, path));
  }

  writeFile(volumeID: string, path: string, data: Readable | Buffer, opts: VolumeWriteOptions): Promise<FileStat> {
    return this.op(volumeID, path, async (h) => {
      const written = await this.files.write(h, path, data, 'user', opts.mode);
      return opts.uid !== undefined || opts.gid !== undefined ? this.files.setOwnerMode(h, path, checkIds(opts)) : written;
    });
  }

  makeDir(volumeID: string, path: string, opts: VolumeWriteOptions): Promise<FileStat> {
    return this.op(volumeID, path, async (h) => {
      const comps = splitSandboxPath(path, '/');
      if (!comps.length) return this.files.stat(h, '/');
      // Without force, the parent must be there (E2B: force makes the parents).
      if (!opts.force && comps.length > 1) {
        const parent = await this.files.stat(h, `/${comps.slice(0, -1).join('/')}`);
        if (parent.type !== 'dir') throw new CubeError('BAD_REQUEST', `'${parent.path}' is not a directory`);
      }
      // Checked before anything is made: a refused makeDir leaves no directory behind.
      const meta = checkIds(opts);
      await this.files.mkdir(h, path, 'user');
      if (meta.uid !== undefined || meta.gid !== undefined || meta.mode !== undefined) return this.files.setOwnerMode(h, path, meta);
      return this.files.stat(h, path);
    });
  }

  removePath(volumeID: string, path: string): Promise<void> {
    return this.op(volumeID, path, (h) => this.files.remove(h, path));
  }

  setMetadata(volumeID: string, path: string, meta: { uid?: number; gid?: number; mode?: number }): Promise<FileStat> {
    return this.op(volumeID, path, (h) => this.files.setOwnerMode(h, path, checkIds(meta)));
  }

  /** Runs a content operation on the volume; a full volume is VOLUME_FULL, whatever the walk called it. */
  private async op<T>(volumeID: string, path: string, fn: (h: SandboxHandle) => Promise<T>): Promise<T> {
    this.dir(volumeID);
    try {
      return await fn({ sandboxID: volumeID, initPid: 0, dir: '' });
    } catch (e) {
      const cause = isCubeError(e) ? (e.cause as NodeJS.ErrnoException | undefined) : (e as NodeJS.ErrnoException);
      if (cause && (cause.errno === EDQUOT_ERRNO || cause.code === 'ENOSPC' || cause.code === 'EDQUOT'))
        throw new CubeError('VOLUME_FULL', `volume ${volumeID} is full: writing '${path}' reached its size limit`, { cause: e });
      throw e;
    }
  }
}

/** cube-launch create's `-v HOSTDIR:PATH` for each mount; 400 for a path it must not take (pure but for `dirOf`). */
export function volumeArgs(mounts: { volumeID: string; path: string }[], dirOf: (volumeID: string) => string): string[] {
  const out: string[] = [];
  for (const m of mounts) {
    const problem = mountPathProblem(m.path);
    if (problem !== undefined) throw new CubeError('BAD_REQUEST', problem);
    out.push('-v', `${dirOf(m.volumeID)}:${m.path}`);
  }
  return out;
}

/**
 * The launcher's refusal of a mount point (a path through a file, or on the read-only /usr of a
 * host-usr template) as the caller's 400, and a volume deleted between the control plane's check
 * and the mount as 404; undefined for any other failure (pure).
 */
export function volumeMountError(stderr: string): CubeError | undefined {
  const m = /volume mount point (\S+)(?:: (?:parent|mkdir))?: (.+)$/m.exec(stderr);
  if (m) return new CubeError('BAD_REQUEST', `volumeMounts: the mount point ${m[1]} cannot be made in this sandbox: ${m[2]!.trim()}`);
  const gone = /open_tree \S*\/(vol-[a-z0-9]{16}): No such file or directory/.exec(stderr);
  return gone ? new CubeError('NOT_FOUND', `volumeMounts: volume ${gone[1]} was deleted while the sandbox was being made`) : undefined;
}

/** 400 unless uid and gid are ids a sandbox maps and mode is a permission mode (pure). */
function checkIds<T extends { uid?: number; gid?: number; mode?: number }>(m: T): { uid?: number; gid?: number; mode?: number } {
  for (const k of ['uid', 'gid'] as const) {
    const v = m[k];
    if (v !== undefined && !(Number.isInteger(v) && v >= 0 && v <= MAX_ID)) throw new CubeError('BAD_REQUEST', `${k} ${v} must be 0-${MAX_ID}`);
  }
  if (m.mode !== undefined && !(Number.isInteger(m.mode) && m.mode >= 0 && m.mode <= 0o7777))
    throw new CubeError('BAD_REQUEST', `mode ${m.mode} must be 0-07777`);
  return {
    ...(m.uid !== undefined ? { uid: m.uid } : {}),
    ...(m.gid !== undefined ? { gid: m.gid } : {}),
    ...(m.mode !== undefined ? { mode: m.mode } : {}),
  };
}
