// Reading image archives: docker-archive (`docker save`), oci-archive (an OCI image layout in a
// tar) and, through the CLI which tars it on the fly, an OCI layout directory. An archive is read
// twice from its spooled file: once for the small JSON documents (manifest.json or index.json,
// manifests, the image config), once streaming the layers into the store. Everything that names a
// digest is checked against it.
import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { pipeline, Readable } from 'node:stream';
import { createGunzip } from 'node:zlib';
import { extract } from 'tar-stream';
import { z } from 'zod';
import { CubeError } from '../../errors.js';
import type { TemplateConfig } from '../../runtime/types.js';
import { DEFAULT_CONFIG } from '../store.js';
import { tarMetaGuard } from './tar-guard.js';

// The JSON documents of an archive, as far as they are read: anything else of another shape is
// refused as IMAGE_INVALID before use (a number where a list of layers goes was a 500).
const StringList = z.array(z.string()).nullish();
const ImageConfigSchema = z.looseObject({
  config: z.looseObject({ Env: StringList, WorkingDir: z.string().nullish(), User: z.string().nullish(), Entrypoint: StringList, Cmd: StringList }).nullish(),
  rootfs: z.looseObject({ type: z.string().nullish(), diff_ids: z.array(z.string()).nullish() }).nullish(),
});
const DockerManifestSchema = z.array(z.looseObject({ Config: z.string(), RepoTags: StringList, Layers: z.array(z.string()) }).nullable()).nullable();
const DescriptorSchema = z.looseObject({
  mediaType: z.string().nullish(),
  digest: z.string(),
  size: z.number().nullish(),
  platform: z.looseObject({ os: z.string().nullish(), architecture: z.string().nullish() }).nullish(),
  annotations: z.record(z.string(), z.string()).nullish(),
});
const OciIndexSchema = z.looseObject({ manifests: z.array(DescriptorSchema).nullish() });
const OciManifestSchema = z.looseObject({ config: DescriptorSchema.nullish(), layers: z.array(DescriptorSchema).nullish() });

/** The part of an OCI/Docker image config we use. */
export type ImageConfig = z.infer<typeof ImageConfigSchema>;

export interface LayerPlan {
  /** Path of the layer's blob in the archive. */
  entry: string;
  /** sha256:<hex> of the uncompressed tar (from the config's rootfs.diff_ids). */
  diffID: string;
  /** sha256:<hex> of the blob as stored (OCI manifests name it; docker-archive does not). */
  blobDigest?: string;
}

export interface ImagePlan {
  format: 'docker-archive' | 'oci';
  config: ImageConfig;
  /** Lowest first. */
  layers: LayerPlan[];
  /** The name the archive gives the image (RepoTags or the OCI ref annotation), if any. */
  refName?: string;
  /** Every file entry of the archive. */
  entries: Set<string>;
}

const SMALL = 4 << 20;
const SMALL_TOTAL = 64 << 20;
const DIGEST_RE = /^sha256:[0-9a-f]{64}$/;

const GZIP = [0x1f, 0x8b];
const ZSTD = [0x28, 0xb5, 0x2f, 0xfd];
const startsWith = (b: Buffer, magic: number[]) => magic.every((m, i) => b[i] === m);

/** 'gzip' | 'zstd' | 'none' from the first bytes (pure). */
export function compressionOf(head: Buffer): 'gzip' | 'zstd' | 'none' {
  return startsWith(head, GZIP) ? 'gzip' : startsWith(head, ZSTD) ? 'zstd' : 'none';
}

/** A stream's bytes, decompressed when they start with the gzip magic; `onRaw` sees the bytes as stored. */
export async function decompressing(src: AsyncIterable<Buffer>, what: string, onRaw?: (b: Buffer) => void): Promise<Readable> {
  const it = src[Symbol.asyncIterator]();
  const first = await it.next();
  const head: Buffer = first.done ? Buffer.alloc(0) : (first.value as Buffer);
  const kind = compressionOf(head);
  if (kind === 'zstd') {
    await it.return?.();
    throw new CubeError('IMAGE_INVALID', `${what} is zstd-compressed, which this node cannot read: save the image uncompressed or with gzip`);
  }
  // The source ends with the stream made of it: a read stopped half-way (an import refused at its
  // bound) would otherwise keep the archive's file open, and with it the store's mount busy.
  async function* raw(): AsyncGenerator<Buffer> {
    try {
      if (first.done) return;
      onRaw?.(head);
      yield head;
      for (;;) {
        const r = await it.next();
        if (r.done) return;
        onRaw?.(r.value as Buffer);
        yield r.value as Buffer;
      }
    } finally {
      await it.return?.();
    }
  }
  const bytes = Readable.from(raw(), { objectMode: false });
  if (kind === 'none') return bytes;
  const gunzip = createGunzip();
  return pipeline(bytes, gunzip, () => undefined);
}

/** Entry names as the archive writes them, without a leading './'. */
function clean(name: string): string {
  return name.replace(/^(\.\/)+/, '');
}

/** Calls `onEntry` for each entry of the archive file (itself possibly gzipped); entries not read are skipped. */
export async function eachEntry(file: string, onEntry: (name: string, size: number, body: Readable) => Promise<void>): Promise<void> {
  const ex = extract();
  const source = await decompressing(createReadStream(file), 'the archive');
  const guard = tarMetaGuard();
  const feeding = new Promise<void>((resolve, reject) => {
    source.once('error', reject);
    guard.once('error', (e) => {
      reject(e);
      ex.destroy(e);
    });
    ex.once('error', reject);
    ex.once('finish', resolve);
    source.pipe(guard).pipe(ex);
  });
  feeding.catch(() => undefined); // awaited below; its error is reported there
  try {
    for await (const entry of ex) {
      const h = entry.header;
      if (h.type === 'file' || h.type === 'contiguous-file') await onEntry(clean(h.name), h.size ?? 0, entry);
      entry.resume();
    }
    await feeding;
  } catch (e) {
    ex.destroy();
    source.destroy();
    if (e instanceof CubeError) throw e;
    const err = e as NodeJS.ErrnoException;
    if (err.syscall) throw e;
    throw new CubeError('IMAGE_INVALID', `corrupt or truncated archive: ${err.message}`, { cause: e });
  }
}

async function readAll(body: Readable): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const c of body) chunks.push(c as Buffer);
  return Buffer.concat(chunks);
}

/** Reads the archive's small documents and works out which blobs are the layers, in order. */
export async function planImport(file: string): Promise<ImagePlan> {
  const small = new Map<string, Buffer>();
  const names = new Set<string>();
  let total = 0;
  await eachEntry(file, async (name, size, body) => {
    names.add(name);
    if (size > SMALL || total + size > SMALL_TOTAL) return;
    if (!(name.endsWith('.json') || name === 'oci-layout' || name.startsWith('blobs/'))) return;
    small.set(name, await readAll(body));
    total += size;
  });
  const json = <S extends z.ZodType>(name: string, what: string, schema: S): z.infer<S> => {
    const buf = small.get(name);
    if (!buf) throw new CubeError('IMAGE_INVALID', `${what} (${name}) is missing from the archive${names.has(name) ? ' or too large' : ''}`);
    let doc: unknown;
    try {
      doc = JSON.parse(buf.toString('utf8'));
    } catch (e) {
      throw new CubeError('IMAGE_INVALID', `${what} (${name}) is not valid JSON: ${(e as Error).message}`);
    }
    const r = schema.safeParse(doc);
    if (!r.success) {
      const issue = r.error.issues[0]!;
      throw new CubeError('IMAGE_INVALID', `${what} (${name}) is not one: ${issue.path.join('.') || '(the document)'}: ${issue.message}`);
    }
    return r.data;
  };
  const blob = <S extends z.ZodType>(digest: string, what: string, schema: S): z.infer<S> => {
    if (!DIGEST_RE.test(digest)) throw new CubeError('IMAGE_INVALID', `${what} has an unsupported digest '${digest}' (sha256 only)`);
    const name = `blobs/sha256/${digest.slice(7)}`;
    const doc = json(name, what, schema);
    const actual = `sha256:${createHash('sha256').update(small.get(name)!).digest('hex')}`;
    if (actual !== digest) throw new CubeError('LAYER_DIGEST_MISMATCH', `${what} ${name} has digest ${actual}, not ${digest}`);
    return doc;
  };

  if (names.has('manifest.json')) {
    const m = json('manifest.json', 'the docker manifest', DockerManifestSchema)?.[0];
    if (!m?.Config) throw new CubeError('IMAGE_INVALID', 'manifest.json names no image (Config and Layers)');
    const config = json(clean(m.Config), 'the image config', ImageConfigSchema);
    const diffIDs = config.rootfs?.diff_ids ?? [];
    if (diffIDs.length !== m.Layers.length)
      throw new CubeError('IMAGE_INVALID', `the image config lists ${diffIDs.length} layer digests for ${m.Layers.length} layers`);
    const layers = m.Layers.map((entry, i) => ({ entry: clean(entry), diffID: checkDigest(diffIDs[i]!, `layer ${i + 1}`) }));
    return { format: 'docker-archive', config, layers, entries: names, ...(m.RepoTags?.[0] ? { refName: m.RepoTags[0] } : {}) };
  }
  if (names.has('index.json')) {
    const index = json('index.json', 'the OCI index', OciIndexSchema);
    let desc = pickManifest(index.manifests ?? []);
    let refName = desc?.annotations?.['org.opencontainers.image.ref.name'];
    for (let depth = 0; desc && /index/.test(desc.mediaType ?? '') && depth < 4; depth++) {
      desc = pickManifest(blob(desc.digest, 'a nested OCI index', OciIndexSchema).manifests ?? []);
      refName ??= desc?.annotations?.['org.opencontainers.image.ref.name'];
    }
    if (!desc) throw new CubeError('IMAGE_INVALID', 'index.json lists no image manifest');
    const manifest = blob(desc.digest, 'the image manifest', OciManifestSchema);
    if (!manifest.config || !manifest.layers) throw new CubeError('IMAGE_INVALID', `manifest ${desc.digest} has no config or layers`);
    const config = blob(manifest.config.digest, 'the image config', ImageConfigSchema);
    const diffIDs = config.rootfs?.diff_ids ?? [];
    if (diffIDs.length !== manifest.layers.length)
      throw new CubeError('IMAGE_INVALID', `the image config lists ${diffIDs.length} layer digests for ${manifest.layers.length} layers`);
    const layers = manifest.layers.map((l, i) => {
      if (/zstd/.test(l.mediaType ?? '')) throw new CubeError('IMAGE_INVALID', `layer ${i + 1} (${l.digest}) is zstd-compressed, which this node cannot read`);
      const blobDigest = checkDigest(l.digest, `layer ${i + 1}`);
      return { entry: `blobs/sha256/${blobDigest.slice(7)}`, diffID: checkDigest(diffIDs[i]!, `layer ${i + 1}`), blobDigest };
    });
    return { format: 'oci', config, layers, entries: names, ...(refName ? { refName } : {}) };
  }
  throw new CubeError('IMAGE_INVALID', 'not an image archive: neither manifest.json (docker save) nor index.json (OCI layout) at its top');
}

function checkDigest(d: string, what: string): string {
  if (typeof d !== 'string' || !DIGEST_RE.test(d)) throw new CubeError('IMAGE_INVALID', `${what} has an unsupported digest '${String(d)}' (sha256 only)`);
  return d;
}

const ARCH: Record<string, string> = { x64: 'amd64', arm64: 'arm64' };

/** The one manifest of an index, or the one for this machine's platform (pure). */
export function pickManifest<T extends { platform?: { os?: string | null; architecture?: string | null } | null }>(list: T[]): T | undefined {
  if (list.length <= 1) return list[0];
  return list.find((d) => d.platform?.os === 'linux' && d.platform.architecture === ARCH[process.arch]) ?? list.find((d) => !d.platform) ?? list[0];
}

/** The template config an image config implies (pure): Env, WorkingDir, User; root or the sandbox user. */
export function templateConfigOf(c: ImageConfig): TemplateConfig {
  const env: Record<string, string> = {};
  for (const kv of c.config?.Env ?? []) {
    const i = kv.indexOf('=');
    const k = i < 0 ? kv : kv.slice(0, i);
    if (/^[A-Za-z_][A-Za-z0-9_]*$/.test(k)) env[k] = i < 0 ? '' : kv.slice(i + 1);
  }
  const user = (c.config?.User ?? '').split(':')[0]!;
  return { ...DEFAULT_CONFIG, env, workdir: c.config?.WorkingDir ?? '', user: user === '' || user === 'root' || user === '0' ? 'root' : 'user' };
}
