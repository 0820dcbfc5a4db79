// Importing an image archive as a template: layers into the node's store (each unpacked once,
// by its diff_id, in a scratch directory renamed into place after its digest checked out), then
// the template record. A failure at any point removes the layers this import added and registers
// nothing; layers already in the store are shared, not unpacked again.
import { createHash, randomBytes } from 'node:crypto';
import { createWriteStream, existsSync } from 'node:fs';
import { chmod, mkdir, rename, rm } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { execa } from 'execa';
import { pack } from 'tar-stream';
import { CubeError, isCubeError } from '../../errors.js';
import { namesOrNone } from '../../fsx.js';
import { isFullError } from '../../storage/sizes.js';
import { SANDBOX_USERS, layerDir, layersRoot, parseTemplateRef, type TemplateRecord, type TemplateStore } from '../store.js';
import type { TemplateConfig } from '../../runtime/types.js';
import { decompressing, eachEntry, planImport, templateConfigOf, type LayerPlan } from './image.js';
import { treeDigest, writeTree } from './tree.js';
import { UnpackBudget, unpackLayer, type UnpackResult } from './unpack.js';
import { HOST_TEMPLATE } from '../../model/template.js';

export interface ImportOptions {
  /** NAME[:TAG] */
  ref: string;
  /** Overrides of the image's config (start and ready commands have no image equivalent). */
  config?: Partial<TemplateConfig>;
  onProgress?: (p: ImportProgress) => void;
}

export interface ImportProgress {
  phase: 'plan' | 'layer' | 'register';
  /** 1-based, with `of`, during 'layer'. */
  layer?: number;
  of?: number;
  digest?: string;
  /** The layer was in the store already. */
  cached?: boolean;
}

/** The store's scratch directory for layers being unpacked (and uploads being spooled). */
export function scratchDir(dataDir: string): string {
  return join(layersRoot(dataDir), 'tmp');
}

/** Removes what a crash mid-import left (scratch dirs, spooled uploads, layers moved aside); run at start. */
export async function cleanScratch(dataDir: string): Promise<void> {
  for (const d of [scratchDir(dataDir), join(layersRoot(dataDir), 'trash')]) {
    for (const name of await namesOrNone(d)) await rm(join(d, name), { recursive: true, force: true });
  }
}

/** Where a data dir of an earlier version kept its layers (on the data dir's filesystem, outside the store). */
export const legacyLayersDir = (dataDir: string): string => join(dataDir, 'layers');
/** The legacy directory once its layers are in the store: kept while sandboxes of before may still run on it. */
export const movedLayersDir = (dataDir: string): string => join(dataDir, 'layers.moved');

/**
 * Moves the layers of a data dir from an earlier version (`<dataDir>/layers`) into the layer store:
 * migrated once at start, after the store is mounted, so every layer has one place and every
 * reader one path (reading both places would spread a second path over a dozen readers). Each
 * entry is renamed where it can be (same filesystem and mount), else copied (cp -a: whiteout
 * devices and opaque xattrs kept) into scratch and renamed in: a crash midway leaves each entry
 * either moved or not, and the next start goes on. The emptied legacy directory is renamed aside
 * (`layers.moved`, still holding what was copied, not moved), since sandboxes re-adopted across
 * the upgrade run on those directories: it is deleted at a start that takes back no sandbox
 * (`adopted` 0). A store too small for the layers fails the start with 130598, nothing lost.
 * Returns the layer entries moved.
 */
export async function migrateLayers(dataDir: string, adopted: number): Promise<number> {
  const old = legacyLayersDir(dataDir);
  const root = layersRoot(dataDir);
  let moved = 0;
  if (await namesOrNone(old).then((n) => n.length > 0)) {
    await ensureStoreDir(dataDir);
    await mkdir(join(root, 'sha256'), { recursive: true });
    await mkdir(scratchDir(dataDir), { recursive: true });
    const entries = [
      ...(await namesOrNone(join(old, 'sha256'))).map((n) => join('sha256', n)),
      ...(await namesOrNone(old)).filter((n) => !['sha256', 'tmp', 'trash'].includes(n)),
    ];
    for (const e of entries) {
      if (existsSync(join(root, e))) continue; // moved by a start that stopped before the rename aside
      await moveEntry(join(old, e), join(root, e), join(scratchDir(dataDir), `migrate-${randomBytes(4).toString('hex')}`));
      moved++;
    }
    await rm(movedLayersDir(dataDir), { recursive: true, force: true });
    await rename(old, movedLayersDir(dataDir));
  }
  if (adopted === 0) await rm(movedLayersDir(dataDir), { recursive: true, force: true });
  return moved;
}

async function moveEntry(from: string, to: string, scratch: string): Promise<void> {
  try {
    return await rename(from, to);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'EXDEV') throw e;
  }
  const r = await execa('cp', ['-a', '--reflink=auto', from, scratch], { reject: false });
  if (r.exitCode !== 0) {
    await rm(scratch, { recursive: true, force: true });
    if (isFullError(r.stderr))
      throw new CubeError(
        'STORE_FULL',
        `moving the layers of ${from} into the layer store: the store is full (${r.stderr.trim()}); nothing was lost: free room in it and start again`,
      );
    throw new CubeError('INTERNAL', `moving the layer ${from} into the layer store: ${r.stderr.trim()}`);
  }
  await rename(scratch, to);
}

/**
 * `<layersRoot>` (store.ts), mode 0700: layers hold the images' own modes (world-writable /tmp dirs and
 * all), which host users must not reach to change what every sandbox of a template sees.
 */
export async function ensureStoreDir(dataDir: string): Promise<void> {
  const dir = layersRoot(dataDir);
  await mkdir(dir, { recursive: true, mode: 0o700 });
  await chmod(dir, 0o700);
}

/** Imports the archive `file` (docker-archive, oci-archive; plain or gzipped) as template `opts.ref`. */
export function importImage(store: TemplateStore, file: string, opts: ImportOptions): Promise<TemplateRecord> {
  const target = parseTemplateRef(opts.ref);
  if (target.name === HOST_TEMPLATE) throw new CubeError('CONFLICT', `template name '${HOST_TEMPLATE}' is reserved`);
  return store.exclusive(async () => {
    const r = await importLayersLocked(store, file, opts.onProgress);
    try {
      opts.onProgress?.({ phase: 'register' });
      return await store.putLocked({
        ...target,
        layers: r.layers,
        config: { ...r.config, ...opts.config },
        source: r.format,
        sizeBytes: r.sizeBytes,
        image: { ...(r.entrypoint ? { entrypoint: r.entrypoint } : {}), ...(r.cmd ? { cmd: r.cmd } : {}) },
      });
    } catch (e) {
      await store.dropUnusedLayers(r.added);
      throw e;
    }
  });
}

/** An archive's layers in the store, with the base layer on top, and the config the image implies. */
export interface ImportedLayers {
  format: 'docker-archive' | 'oci';
  /** Lowest first, the base layer last. */
  layers: string[];
  config: TemplateConfig;
  entrypoint?: string[];
  cmd?: string[];
  /** Unpacked bytes of the layers this import added. */
  sizeBytes: number;
  /** Layers this import put in the store (a caller whose registration fails drops them). */
  added: string[];
}

/**
 * The layers of archive `file` into the store (each unpacked once), registering nothing; for a
 * caller inside store.exclusive(). A failure removes the layers it added.
 */
export async function importLayersLocked(store: TemplateStore, file: string, onProgress?: (p: ImportProgress) => void): Promise<ImportedLayers> {
  await ensureStoreDir(store.dataDir);
  onProgress?.({ phase: 'plan' });
  const plan = await planImport(file);
  const added: string[] = [];
  const budget = new UnpackBudget(store.unpackMaxBytes());
  try {
    const byEntry = new Map<string, LayerPlan>();
    for (const l of plan.layers) byEntry.set(l.entry, l);
    const have = new Set(plan.layers.filter((l) => existsSync(layerDir(store.dataDir, l.diffID))).map((l) => l.diffID));
    const seen = new Set<string>();
    let sizeBytes = 0;
    let n = 0;
    // A second read of the archive only when some layer is new to the store.
    const needed = plan.layers.some((l) => !have.has(l.diffID));
    if (!needed) for (const l of plan.layers) if (plan.entries.has(l.entry)) seen.add(l.entry);
    if (needed)
      await eachEntry(file, async (name, _size, body) => {
        const l = byEntry.get(name);
        if (!l || seen.has(name)) return;
        seen.add(name);
        n++;
        const cached = have.has(l.diffID);
        onProgress?.({ phase: 'layer', layer: n, of: byEntry.size, digest: l.diffID, cached });
        if (cached) return;
        const r = await addLayer(store.dataDir, body, l, `layer ${plan.layers.indexOf(l) + 1} (${l.diffID})`, budget);
        added.push(l.diffID);
        have.add(l.diffID);
        sizeBytes += r.sizeBytes;
      });
    const missing = [...byEntry.values()].filter((l) => !seen.has(l.entry));
    if (missing.length)
      throw new CubeError('IMAGE_INVALID', `the archive lacks ${missing.map((l) => `layer ${plan.layers.indexOf(l) + 1} (${l.entry})`).join(', ')}`);
    const base = await ensureBaseLayer(store.dataDir, budget);
    if (base.added) added.push(base.digest);
    const image = plan.config.config;
    return {
      format: plan.format,
      layers: lastOccurrences([...plan.layers.map((l) => l.diffID), base.digest]),
      config: templateConfigOf(plan.config),
      ...(image?.Entrypoint ? { entrypoint: image.Entrypoint } : {}),
      ...(image?.Cmd ? { cmd: image.Cmd } : {}),
      sizeBytes,
      added,
    };
  } catch (e) {
    await store.dropUnusedLayers(added);
    throw e;
  }
}

/** Imports an archive arriving as `body` (an API upload, or one a control replica forwards): spooled under the store's scratch dir, then imported. */
export async function importUpload(store: TemplateStore, body: Readable, opts: ImportOptions): Promise<TemplateRecord> {
  await ensureStoreDir(store.dataDir);
  const dir = scratchDir(store.dataDir);
  await mkdir(dir, { recursive: true });
  const file = join(dir, `upload-${randomBytes(6).toString('hex')}`);
  try {
    await spoolUpload(body, file, store.unpackMaxBytes());
    return await importImage(store, file, opts);
  } finally {
    await rm(file, { force: true });
  }
}

/**
 * Writes an upload (an image archive, a build's COPY files) to `file`, a new file in the store's
 * scratch: bounded as an import's unpacking is (an archive is at most about the size of its layers
 * unpacked), chunk by chunk, so an upload never fills the store under the sandboxes: 413 over
 * `limitBytes`, 503 before the store keeps less than 256 MiB free, 400 when the stream breaks.
 */
export async function spoolUpload(body: Readable, file: string, limitBytes: number): Promise<void> {
  const budget = new UnpackBudget(limitBytes);
  const dir = dirname(file);
  await pipeline(
    body,
    async function* (chunks: AsyncIterable<Buffer>) {
      for await (const chunk of chunks) {
        await budget.charge(chunk.length, dir, 'the upload');
        yield chunk;
      }
    },
    createWriteStream(file, { flags: 'wx', mode: 0o600 }),
  ).catch((e: unknown) => {
    if (isCubeError(e)) throw e;
    const err = e as NodeJS.ErrnoException;
    if (err.code === 'ENOSPC' || err.code === 'EDQUOT')
      throw new CubeError('STORE_FULL', `no room for the upload under ${dir}: ${err.message}`, { retryAfter: 60 });
    throw new CubeError('BAD_REQUEST', `upload interrupted: ${err.message}`);
  });
}

/** Unpacks one layer blob (gzipped or not) into the store; checks its blob digest and diff_id. */
async function addLayer(dataDir: string, body: AsyncIterable<Buffer>, l: LayerPlan, what: string, budget: UnpackBudget): Promise<UnpackResult> {
  const scratch = join(scratchDir(dataDir), `${l.diffID.slice(7, 19)}.${randomBytes(4).toString('hex')}`);
  await mkdir(scratch, { recursive: true });
  try {
    const blobHash = l.blobDigest ? createHash('sha256') : undefined;
    const tar = await decompressing(body, what, blobHash ? (b) => blobHash.update(b) : undefined);
    const r = await unpackLayer(tar, scratch, budget, { what }).catch((e: unknown) => {
      if (e instanceof CubeError && e.kind === 'IMAGE_INVALID') throw new CubeError('IMAGE_INVALID', `${what}: ${e.message}`, { cause: e });
      throw e;
    });
    if (blobHash) {
      const blob = `sha256:${blobHash.digest('hex')}`;
      if (blob !== l.blobDigest) throw new CubeError('LAYER_DIGEST_MISMATCH', `${what}: the blob has digest ${blob}, the manifest says ${l.blobDigest}`);
    }
    if (r.diffID !== l.diffID)
      throw new CubeError('LAYER_DIGEST_MISMATCH', `${what}: the unpacked tar has digest ${r.diffID}, the image config says ${l.diffID}`);
    // Taken from the content whose diff_id just checked out: what other nodes verify their copy against.
    const tree = await treeDigest(scratch);
    const dest = layerDir(dataDir, l.diffID);
    await mkdir(join(dest, '..'), { recursive: true });
    await rename(scratch, dest);
    await writeTree(dataDir, l.diffID, tree);
    return r;
  } catch (e) {
    await rm(scratch, { recursive: true, force: true });
    throw e;
  }
}

/**
 * The layer every imported template gets on top: what the runtime expects of a root filesystem
 * and images seldom have (the sandbox user's home, /root, /tmp, a resolv.conf). Made from a
 * fixed tar, so its digest is the same on every node and it is stored once.
 */
export async function ensureBaseLayer(dataDir: string, budget: UnpackBudget): Promise<{ digest: string; added: boolean }> {
  const tar = await baseLayerTar();
  const digest = `sha256:${createHash('sha256').update(tar).digest('hex')}`;
  if (existsSync(layerDir(dataDir, digest))) return { digest, added: false };
  await addLayer(dataDir, Readable.from([tar]), { entry: '(base)', diffID: digest }, 'the base layer', budget);
  return { digest, added: true };
}

let baseTar: Buffer | undefined;

async function baseLayerTar(): Promise<Buffer> {
  if (baseTar) return baseTar;
  const p = pack();
  const mtime = new Date(0);
  const u = SANDBOX_USERS.user;
  const dir = (name: string, mode: number, uid = 0, gid = 0) => p.entry({ name, type: 'directory', mode, uid, gid, mtime });
  dir('home/', 0o755);
  dir('home/user/', 0o755, u.uid, u.gid);
  dir('root/', 0o700);
  dir('tmp/', 0o1777);
  dir('etc/', 0o755);
  p.entry({ name: 'etc/resolv.conf', mode: 0o644, uid: 0, gid: 0, mtime }, 'nameserver 8.8.8.8\nnameserver 1.1.1.1\n');
  p.finalize();
  const chunks: Buffer[] = [];
  for await (const chunk of p) chunks.push(chunk as Buffer);
  baseTar = Buffer.concat(chunks);
  return baseTar;
}

/**
 * A layer listed twice (images repeat their empty layer) kept only where it is highest: overlayfs
 * refuses the same lower directory twice, and the higher copy re-applies every file of the lower
 * one anyway (pure).
 */
export function lastOccurrences(layers: readonly string[]): string[] {
  return layers.filter((l, i) => layers.indexOf(l, i + 1) < 0);
}
