// The files COPY steps take: uploaded by the SDK as tars under the SDK's files hash, kept per
// API key, checked to be readable tars at upload and against the hash at build start.
import { randomUUID } from 'node:crypto';
import { createReadStream, existsSync } from 'node:fs';
import { link, mkdir, open, rm } from 'node:fs/promises';
import { join } from 'node:path';
import type { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { createGunzip } from 'node:zlib';
import { extract } from 'tar-stream';
import { CubeError, toCubeError } from '../../errors.js';
import { ensureStoreDir, spoolUpload } from '../layers/import.js';
import { TAR_META_MAX_BYTES, tarMetaGuard } from '../layers/tar-guard.js';
import { FilesHash, S_IFLNK, S_IFREG } from './files-hash.js';
import { checkFilesHash } from './steps.js';
import { layersRoot } from '../store.js';

/** The uploads of calls that name no key (in-process callers: tests). */
const SHARED_UPLOADS = 'shared';

/** The uploads of COPY steps: `<layersRoot>/files/<owner>/<files hash>`, the SDK's tars. */
export class BuildUploads {
  readonly dir: string;

  /** `maxBytes`: the most one upload may hold (the per-import limit, cubelet.storage.layer_unpack_max_gib: uploads are in the store). */
  constructor(
    private readonly dataDir: string,
    private readonly maxBytes: () => number,
  ) {
    this.dir = join(layersRoot(dataDir), 'files');
  }

  /** Where `owner`'s upload for `hash` is kept (`owner` from owner()). */
  file(owner: string, hash: string): string {
    return join(this.dir, owner, hash);
  }

  /**
   * Where the uploads of `owner` (the API key that uploaded them) are kept: each key's own, so no
   * client can replace or pre-seed what another's builds copy, whatever its files hash says
   * (uploads holding directories cannot be checked against it: verifyUpload). Builds copy from
   * their starter's, and cache a COPY's layer per owner (stepKey).
   */
  owner(owner: string | undefined): string {
    const o = owner ?? SHARED_UPLOADS;
    if (!/^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/.test(o)) throw new CubeError('BAD_REQUEST', `upload owner ${JSON.stringify(o.slice(0, 70))} is not a key id`);
    return o;
  }

  /** Whether the files of a COPY (by the SDK's hash) were uploaded by `owner`. */
  has(hash: string, owner?: string): boolean {
    return existsSync(join(this.dir, this.owner(owner), checkFilesHash(hash)));
  }

  /**
   * Keeps an upload (the SDK's tar, gzipped or not) under its files hash, among `owner`'s: written
   * aside, refused (400) when it is not a readable tar (it cannot hold what any hash says), then
   * linked into place. The first upload of a hash stays, a later one is dropped (a rename replaced
   * what was there). What the hash says is checked at build start (verifyUpload): the hash begins
   * with the COPY line, which only the build names.
   */
  async put(hash: string, body: Readable, owner?: string): Promise<void> {
    await ensureStoreDir(this.dataDir);
    const dir = join(this.dir, this.owner(owner));
    await mkdir(dir, { recursive: true });
    const tmp = join(dir, `${checkFilesHash(hash)}.${randomUUID().slice(0, 8)}.tmp`);
    try {
      await spoolUpload(body, tmp, this.maxBytes());
      const unreadable = await this.tarProblem(tmp);
      if (unreadable !== undefined)
        throw new CubeError(
          'BAD_REQUEST',
          `the upload for files hash ${hash} is not a tar (gzipped or not) cubed reads (${unreadable}): refused, nothing kept changed`,
        );
      await link(tmp, join(dir, hash)).catch((e: NodeJS.ErrnoException) => {
        if (e.code !== 'EEXIST') throw e;
      });
    } finally {
      await rm(tmp, { force: true });
    }
  }

  /** The entries of an upload file (a tar, gzipped or not), streamed; `feeding` settles when the file is read. */
  async entries(file: string): Promise<{ ex: ReturnType<typeof extract>; feeding: Promise<void> }> {
    const head = Buffer.alloc(2);
    await open(file, 'r').then(async (fh) => {
      await fh.read(head, 0, 2, 0);
      await fh.close();
    });
    const ex = extract();
    const input = createReadStream(file);
    // The same bound on long-name and PAX headers as an image archive's (tar-guard.ts): tar-stream holds such a body whole.
    const guard = tarMetaGuard(TAR_META_MAX_BYTES, 'the build upload');
    const feeding = head[0] === 0x1f && head[1] === 0x8b ? pipeline(input, createGunzip(), guard, ex) : pipeline(input, guard, ex);
    feeding.catch(() => undefined); // awaited by the caller; its error is reported there
    return { ex, feeding };
  }

  /** Why `file` is not a tar this reads to its end (undefined when it is). */
  private async tarProblem(file: string): Promise<string | undefined> {
    const { ex, feeding } = await this.entries(file);
    try {
      for await (const entry of ex) entry.resume();
      await feeding;
      return undefined;
    } catch (e) {
      return toCubeError(e).message;
    }
  }

  /**
   * Whether `owner`'s upload for a COPY holds what its files hash says (the SDK's hash, steps.ts
   * FilesHash): true or false for an upload of files and links; undefined when it holds
   * directories or hard links, whose hashed sizes (the client's st_size of a directory, the linked
   * file's size; the SDK's tar writes 0) an upload does not carry, so nothing can be recomputed:
   * such an upload is only ever copied by builds of the key that uploaded it (uploadsOf).
   */
  async verify(s: { src: string; dest: string; filesHash: string }, owner?: string): Promise<boolean | undefined> {
    const h = new FilesHash(s.src, s.dest);
    const { ex, feeding } = await this.entries(join(this.dir, this.owner(owner), s.filesHash));
    try {
      for await (const entry of ex) {
        const { name, type, mode = 0, size = 0, linkname } = entry.header;
        const rel = name.replace(/\/+$/, '');
        if (type === 'file' || type === 'contiguous-file') {
          h.entry(rel, S_IFREG | (mode & 0o7777), size);
          for await (const chunk of entry) h.data(chunk as Buffer);
        } else if (type === 'symlink') {
          h.entry(rel, S_IFLNK | (mode & 0o7777), Buffer.byteLength(linkname ?? '')).data(linkname ?? '');
          entry.resume();
        } else {
          entry.resume();
          ex.destroy();
          return undefined;
        }
      }
      await feeding;
    } catch {
      return false; // not a readable tar: it cannot hold what any hash says
    }
    return h.digest() === s.filesHash;
  }
}
