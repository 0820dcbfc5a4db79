// Issue 29 item 6, unpacking's side: layers live in the node's store, and what one import unpacks
// is bounded by cubelet.storage.layer_unpack_max_gib (413, code 130437) and by the store's free
// space (503, code 130598), charged as the entries come. A decompression bomb (a 2 MB upload of
// 2 GiB of zeros, the shape of the one that filled the host's root filesystem) and a flood of empty
// files are refused and leave nothing: no layer, no scratch, no spooled upload, no template.
// On a real loop-mounted store (1 GiB) under the test's own data dir, removed at the end.
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { readdir, rm, statfs, writeFile } from 'node:fs/promises';
import { basename, join } from 'node:path';
import { Readable } from 'node:stream';
import { gzipSync } from 'node:zlib';
import { beforeAll, describe, expect, it } from 'vitest';
import { ErrorTable } from '../../src/errors.js';
import { BTRFS_MAGIC, BtrfsStore } from '../../src/storage/btrfs-store.js';
import { BuildUploads } from '../../src/templates/build/uploads.js';
import { importUpload } from '../../src/templates/layers/import.js';
import { pullTemplate, resolveImage } from '../../src/templates/layers/pull.js';
import { layerDir, layersRoot, TemplateStore } from '../../src/templates/store.js';
import { busyboxLayer, dockerArchive, tarOf } from '../helpers/images.js';
import { useLoopStore } from '../helpers/loop-store.js';
import { startRegistry } from '../helpers/registry.js';

const MIB = 1024 ** 2;
const GIB = 1024 ** 3;

/** A ustar header of a regular file `name` of `size` bytes. */
function tarHeader(name: string, size: number): Buffer {
  const h = Buffer.alloc(512);
  h.write(name, 0);
  h.write('0000644\0', 100);
  h.write('0000000\0', 108);
  h.write('0000000\0', 116);
  h.write(`${size.toString(8).padStart(11, '0')}\0`, 124);
  h.write('00000000000\0', 136);
  h.write('        ', 148);
  h.write('0', 156);
  h.write('ustar\0', 257);
  h.write('00', 263);
  const sum = h.reduce((a, b) => a + b, 0);
  h.write(`${sum.toString(8).padStart(6, '0')}\0 `, 148);
  return h;
}

/**
 * A gzipped layer tar holding one file of `bytes` zeros (a multiple of 64 MiB): gzip members
 * concatenated (a gunzip reads them as one stream), the 64 MiB one repeated, so it is made in a
 * second and never held whole.
 */
function zeroBomb(bytes: number): Buffer {
  const piece = gzipSync(Buffer.alloc(64 * MIB), { level: 9 });
  return Buffer.concat([gzipSync(tarHeader('zeros', bytes)), ...Array.from({ length: bytes / (64 * MIB) }, () => piece), gzipSync(Buffer.alloc(1024))]);
}

describe('bounded layer imports', () => {
  const loop = useLoopStore('layer-bounds');
  let dataDir = '';
  let store: BtrfsStore;
  let limit = 64 * MIB;
  let templates: TemplateStore;
  let bomb: Buffer;

  beforeAll(async () => {
    ({ dataDir, store } = loop());
    templates = new TemplateStore(dataDir, () => limit);
    // The diff_id is never reached: the import is refused while unpacking, before the digest check.
    bomb = await dockerArchive([zeroBomb(2 * GIB)], { Cmd: ['/bin/sh'] }, { diffIDs: [`sha256:${'e'.repeat(64)}`] });
  });

  /** Nothing of a refused import is left: no layer, no scratch or spooled upload, no template. */
  const nothingLeft = async () => {
    expect(await readdir(join(layersRoot(dataDir), 'sha256')).catch(() => [])).toEqual([]);
    expect(await readdir(join(layersRoot(dataDir), 'tmp'))).toEqual([]);
    expect(await templates.listRecords()).toEqual([]);
  };

  it('keeps imported layers in the store (its filesystem, its space)', async () => {
    limit = 64 * MIB;
    const rec = await importUpload(templates, Readable.from([await dockerArchive([await tarOf(busyboxLayer())], {})]), { ref: 'small' });
    for (const l of rec.layers) {
      expect(layerDir(dataDir, l).startsWith(`${store.path}/`)).toBe(true);
      expect((await statfs(layerDir(dataDir, l))).type).toBe(BTRFS_MAGIC);
    }
    await templates.remove('small', async () => []);
    await nothingLeft();
  });

  it(`refuses a decompression bomb (a small upload of 2 GiB of zeros) at the per-import limit with 413, leaving nothing`, async () => {
    limit = 64 * MIB;
    expect(bomb.length).toBeLessThan(4 * MIB);
    const err = await importUpload(templates, Readable.from([bomb]), { ref: 'bomb' }).catch((e: unknown) => e);
    expect(err).toMatchObject({ kind: 'LAYER_TOO_LARGE', message: expect.stringMatching(/more than 0\.06 GiB .*layer_unpack_max_gib/) });
    expect(ErrorTable.LAYER_TOO_LARGE).toMatchObject({ code: 130437, http: 413 });
    await nothingLeft();
  });

  it("refuses the same bomb under a limit it fits by the store's free space (503), leaving nothing", async () => {
    limit = 32 * GIB;
    const err = await importUpload(templates, Readable.from([bomb]), { ref: 'bomb' }).catch((e: unknown) => e);
    expect(err).toMatchObject({ kind: 'STORE_FULL', message: expect.stringMatching(/does not fit the layer store: .* GiB free/) });
    await nothingLeft();
  });

  it('bounds the spooled upload the same way (it is in the store too)', async () => {
    limit = MIB;
    const big = await tarOf([{ name: 'blob', content: randomBytes(2 * MIB) }]);
    const err = await importUpload(templates, Readable.from([await dockerArchive([big], {})]), { ref: 'big' }).catch((e: unknown) => e);
    expect(err).toMatchObject({ kind: 'LAYER_TOO_LARGE', message: expect.stringMatching(/^the upload: more than/) });
    await nothingLeft();
  });

  it("bounds a build's COPY upload the same way", async () => {
    const uploads = new BuildUploads(dataDir, () => MIB);
    const err = await uploads.put('a'.repeat(64), Readable.from([randomBytes(2 * MIB)])).catch((e: unknown) => e);
    expect(err).toMatchObject({ kind: 'LAYER_TOO_LARGE', message: expect.stringMatching(/^the upload: more than/) });
    expect(await readdir(uploads.dir, { recursive: true })).toEqual(['shared']); // its owner's directory, empty
  });

  it('bounds a registry pull while skopeo spools it, leaving nothing', async () => {
    const reg = await startRegistry();
    try {
      const archive = join(dataDir, '..', `${basename(dataDir)}-pull.tar`);
      await writeFile(archive, await dockerArchive([await tarOf([{ name: 'blob', content: randomBytes(96 * MIB) }])], {}));
      await reg.push(archive, 'team/big:v1', 'docker-archive');
      await rm(archive);
      limit = 16 * MIB;
      const a = { insecure: [reg.host] };
      const image = await resolveImage(dataDir, `${reg.host}/team/big:v1`, a);
      const err = await pullTemplate(templates, image, { ...a, ref: 'big' }).catch((e: unknown) => e);
      expect(err).toMatchObject({ kind: 'LAYER_TOO_LARGE', message: expect.stringMatching(/^the pulled image: more than/) });
      await nothingLeft();
    } finally {
      await reg.stop();
    }
  }, 120_000);

  it('charges every entry, so a flood of empty files stops at the limit too', async () => {
    limit = 8 * MIB; // 2048 entries of 4 KiB
    const flood = await tarOf(Array.from({ length: 3000 }, (_, i) => ({ name: `f${i}`, content: '' })));
    const err = await importUpload(templates, Readable.from([await dockerArchive([flood], {}, { gzip: true })]), { ref: 'flood' }).catch((e: unknown) => e);
    expect(err).toMatchObject({ kind: 'LAYER_TOO_LARGE' });
    await nothingLeft();
    expect(existsSync(join(layersRoot(dataDir), 'trash')) ? await readdir(join(layersRoot(dataDir), 'trash')) : []).toEqual([]);
  });
});
