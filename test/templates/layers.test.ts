// The layer store: pure path rules, image archives imported into the store (docker-archive,
// oci-archive, gzipped layers), hostile archives refused with nothing registered or written
// outside, and sandboxes of the ns runtime mounting the layers as an overlay stack.
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync } from 'node:fs';
import { lstat, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { planImport, templateConfigOf } from '../../src/templates/layers/image.js';
import { importImage, lastOccurrences } from '../../src/templates/layers/import.js';
import { entryPath, whiteoutOf } from '../../src/templates/layers/unpack.js';
import { lowerArgs } from '../../src/runtime/ns/lowerdir.js';
import { layersRoot, parseTemplateRef, TemplateStore } from '../../src/templates/store.js';
import { busyboxLayer, dockerArchive, ociArchive, tarOf, type TarEntry } from '../helpers/images.js';
import { run, useRig } from '../runtime/harness.js';

describe('layer paths (pure)', () => {
  it.each([
    ['a/b', 'a/b'],
    ['./a/b/', 'a/b'],
    ['./', ''],
    ['a/../b', 'b'],
    ['a//b', 'a/b'],
  ])('entry %s is %s', (name, want) => expect(entryPath(name)).toBe(want));
  it.each(['../x', 'a/../../x', '/etc/passwd', '..', 'a\0b'])('entry %s is refused', (name) =>
    expect(() => entryPath(name)).toThrow(expect.objectContaining({ kind: 'IMAGE_INVALID' })),
  );
  it('knows whiteouts and opaque markers', () => {
    expect(whiteoutOf('etc/.wh.passwd')).toEqual({ kind: 'whiteout', path: 'etc/passwd' });
    expect(whiteoutOf('.wh.top')).toEqual({ kind: 'whiteout', path: 'top' });
    expect(whiteoutOf('opt/.wh..wh..opq')).toEqual({ kind: 'opaque', dir: 'opt' });
    expect(whiteoutOf('.wh..wh.plnk')).toEqual({ kind: 'ignore' });
    expect(whiteoutOf('etc/passwd')).toBeUndefined();
    expect(() => whiteoutOf('a/.wh...')).toThrow();
  });
  it('stacks layers top first, by name in their shared parent', () => {
    const l = (h: string) => `/var/lib/cubed/layers/sha256/${h.repeat(64)}`;
    expect(lowerArgs([l('a'), l('b')], '/u', '/w')).toEqual(['-L', '/var/lib/cubed/layers/sha256', '-l', `${'b'.repeat(64)}:${'a'.repeat(64)}`]);
    expect(lowerArgs(['/x/rootfs'], '/u', '/w')).toEqual(['-l', '/x/rootfs']);
    expect(lowerArgs(['/x/a', '/y/b'], '/u', '/w')).toEqual(['-l', '/y/b:/x/a']);
    expect(() => lowerArgs(['/x/a:b'], '/u', '/w')).toThrow(/overlayfs option syntax/);
    // 59 store layers fit beside upper and work paths of 100 bytes; 60 do not.
    const many = (n: number) => Array.from({ length: n }, (_, i) => `/var/lib/cubed/layers/sha256/${i.toString(16).padStart(64, '0')}`);
    const up = `/${'u'.repeat(99)}`;
    expect(lowerArgs(many(59), up, up)[0]).toBe('-L');
    expect(() => lowerArgs(many(60), up, up)).toThrow(/over the kernel's 4096/);
    expect(lastOccurrences(['a', 'b', 'a', 'c'])).toEqual(['b', 'a', 'c']);
  });
  it('reads NAME[:TAG] and the image config', () => {
    expect(parseTemplateRef('py')).toEqual({ name: 'py', tag: 'latest', ref: 'py:latest' });
    expect(parseTemplateRef('py:3.12')).toEqual({ name: 'py', tag: '3.12', ref: 'py:3.12' });
    expect(() => parseTemplateRef('Py')).toThrow();
    expect(templateConfigOf({ config: { Env: ['A=1', 'B=x=y', 'bad-name=1'], WorkingDir: '/app', User: '1000:1000' } })).toEqual({
      env: { A: '1', B: 'x=y' },
      workdir: '/app',
      user: 'user',
    });
    expect(templateConfigOf({ config: { User: 'root' } }).user).toBe('root');
    expect(templateConfigOf({}).user).toBe('root');
  });
});

/** Two layers: busybox with /etc/motd and /opt/old; then a whiteout of motd, /opt made opaque, /opt/new. */
async function twoLayers(): Promise<Buffer[]> {
  const base = await tarOf([
    ...busyboxLayer(),
    { name: 'etc/motd', content: 'hello\n' },
    { name: 'opt/', type: 'directory' },
    { name: 'opt/old', content: 'old\n' },
    { name: 'opt/keep/', type: 'directory' },
  ]);
  const top = await tarOf([
    { name: 'etc/.wh.motd' },
    { name: 'opt/', type: 'directory' },
    { name: 'opt/.wh..wh..opq' },
    { name: 'opt/new', content: 'new\n' },
    { name: 'app/', type: 'directory', uid: 1000, gid: 1000 },
    { name: 'app/run.sh', content: '#!/bin/sh\necho run\n', mode: 0o755 },
    { name: 'app/run2.sh', type: 'link', linkname: 'app/run.sh' },
  ]);
  return [base, top];
}

describe('importing images into the layer store', () => {
  const rig = useRig('layers');
  let scratch: string;
  let store: TemplateStore;
  beforeAll(async () => {
    scratch = await mkdtemp(join(tmpdir(), 'cubed-test-layers-'));
    store = new TemplateStore(rig().dataDir);
  });
  afterAll(async () => {
    await rm(scratch, { recursive: true, force: true });
  });
  const file = async (name: string, data: Buffer) => {
    const f = join(scratch, name);
    await writeFile(f, data);
    return f;
  };
  // The layers' directories (each has a `<hex>.tree` digest beside it: src/templates/layers/tree.ts).
  const layerDirs = async () =>
    (await readdir(join(layersRoot(rig().dataDir), 'sha256'), { withFileTypes: true }).catch(() => [])).filter((e) => e.isDirectory()).map((e) => e.name);

  it('imports a docker-archive and an oci-archive sharing their layers, and runs sandboxes from both', async () => {
    const layers = await twoLayers();
    const cfg = { Env: ['GREETING=from-image', 'PATH=/bin:/usr/bin'], WorkingDir: '/app', Cmd: ['/bin/sh'] };
    const a = await importImage(store, await file('d.tar', await dockerArchive(layers, cfg)), { ref: 'bb' });
    expect(a).toMatchObject({
      ref: 'bb:latest',
      source: 'docker-archive',
      config: { env: { GREETING: 'from-image' }, workdir: '/app', user: 'root' },
      image: { cmd: ['/bin/sh'] },
    });
    expect(a.layers).toHaveLength(3); // two image layers and the base layer
    const b = await importImage(store, await file('o.tar', await ociArchive(layers, cfg, { gzip: true })), { ref: 'bb:oci' });
    expect(b.layers).toEqual(a.layers); // same diff_ids: stored once
    expect(await layerDirs()).toHaveLength(3);
    expect(existsSync(join(layersRoot(rig().dataDir), 'tmp')) ? await readdir(join(layersRoot(rig().dataDir), 'tmp')) : []).toEqual([]);

    expect((await lstat(layersRoot(rig().dataDir))).mode & 0o777).toBe(0o700); // host users cannot reach into layers
    const top = (await store.resolve('bb')).layers[1]!;
    expect((await lstat(join(top, 'etc/motd'))).isCharacterDevice()).toBe(true);
    expect((await lstat(join(top, 'app'))).uid).toBe(1000);

    for (const name of ['bb', 'bb:oci']) {
      const template = await store.resolve(name);
      const h = await rig().driver.create(rig().spec({ template, env: template.config!.env }));
      try {
        const r = await run(
          rig(),
          h,
          ['/bin/sh', '-c', 'cat /opt/new; ls /opt; test -e /etc/motd || echo motd-gone; echo $GREETING; /app/run2.sh; id -u; ls -d /home/user'],
          { user: 'root' },
        );
        expect(r.stderr).toBe('');
        expect(r.stdout).toBe('new\nnew\nmotd-gone\nfrom-image\nrun\n0\n/home/user\n');
      } finally {
        await rig().driver.destroy(h.sandboxID);
      }
    }
  });

  const hostile: [string, TarEntry[], RegExp][] = [
    ['a .. path', [{ name: '../../escaped', content: 'x' }], /escapes the layer root/],
    ['an absolute path', [{ name: '/escaped', content: 'x' }], /absolute path/],
    [
      'a write through a symlink',
      [
        { name: 'evil', type: 'symlink', linkname: '/tmp' },
        { name: 'evil/escaped', content: 'x' },
      ],
      /passes through the symlink 'evil'/,
    ],
    [
      'a write through a symlink to ..',
      [
        { name: 'd/', type: 'directory' },
        { name: 'd/up', type: 'symlink', linkname: '../..' },
        { name: 'd/up/escaped', content: 'x' },
      ],
      /passes through the symlink/,
    ],
    ['a hard link out', [{ name: 'h', type: 'link', linkname: '../../../etc/passwd' }], /points outside the layer/],
    ['a hard link to an absolute path', [{ name: 'h', type: 'link', linkname: '/etc/passwd' }], /points outside the layer/],
  ];
  it.each(hostile)('refuses %s and registers nothing', async (_what, entries, message) => {
    const before = await layerDirs();
    const layers = [await tarOf(busyboxLayer()), await tarOf(entries)];
    const f = await file('hostile.tar', await dockerArchive(layers, {}));
    await expect(importImage(store, f, { ref: 'hostile' })).rejects.toMatchObject({ kind: 'IMAGE_INVALID', message: expect.stringMatching(message) });
    await expect(store.get('hostile')).rejects.toMatchObject({ kind: 'NOT_FOUND' });
    expect(existsSync(join(tmpdir(), 'escaped')) || existsSync('/escaped')).toBe(false);
    expect((await layerDirs()).sort()).toEqual(before.sort()); // the busybox layer it added is gone again
    expect(await readdir(join(layersRoot(rig().dataDir), 'tmp'))).toEqual([]);
  });

  it('skips device nodes and FIFOs', async () => {
    const f = await file(
      'dev.tar',
      await dockerArchive(
        [
          await tarOf([
            ...busyboxLayer(),
            { name: 'dev/', type: 'directory' },
            { name: 'dev/sda', type: 'block-device' },
            { name: 'dev/mem', type: 'character-device' },
            { name: 'p', type: 'fifo' },
          ]),
        ],
        {},
      ),
    );
    const rec = await importImage(store, f, { ref: 'devices' });
    const dir = (await store.resolve('devices')).layers[0]!;
    expect(await readdir(join(dir, 'dev'))).toEqual([]);
    expect(existsSync(join(dir, 'p'))).toBe(false);
    await store.remove(rec.ref, async () => []);
  });

  it('refuses a digest mismatch naming the layer, a truncated archive and a non-image', async () => {
    const layers = await twoLayers();
    const wrong = `sha256:${'0'.repeat(64)}`;
    const f1 = await file(
      'mismatch.tar',
      await dockerArchive(layers, {}, { diffIDs: [(await planImport(await file('ok.tar', await dockerArchive(layers, {})))).layers[0]!.diffID, wrong] }),
    );
    await expect(importImage(store, f1, { ref: 'mismatch' })).rejects.toMatchObject({
      kind: 'LAYER_DIGEST_MISMATCH',
      message: expect.stringContaining(`layer 2 (${wrong})`),
    });
    const whole = await ociArchive(layers, {});
    const f2 = await file('truncated.tar', whole.subarray(0, Math.floor(whole.length * 0.6)));
    await expect(importImage(store, f2, { ref: 'truncated' })).rejects.toMatchObject({ kind: 'IMAGE_INVALID' });
    const f3 = await file('plain.tar', await tarOf([{ name: 'hello.txt', content: 'hi' }]));
    await expect(importImage(store, f3, { ref: 'plain' })).rejects.toMatchObject({
      kind: 'IMAGE_INVALID',
      message: expect.stringMatching(/not an image archive/),
    });
    const f4 = await file('garbage.tar', Buffer.from('this is not a tar file at all'.repeat(40)));
    await expect(importImage(store, f4, { ref: 'garbage' })).rejects.toMatchObject({ kind: 'IMAGE_INVALID' });
    for (const n of ['mismatch', 'truncated', 'plain', 'garbage']) await expect(store.get(n)).rejects.toMatchObject({ kind: 'NOT_FOUND' });
    expect(await readdir(join(layersRoot(rig().dataDir), 'tmp'))).toEqual([]);
  });

  it('answers STORE_FULL when the filesystem of the store fills up, leaving nothing', async () => {
    const dir = join(scratch, 'cube-full-store');
    mkdirSync(dir);
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=4m', 'cube-full-store', dir]);
    try {
      const small = new TemplateStore(dir);
      const big = await tarOf([...busyboxLayer(), { name: 'fill', content: randomBytes(6 << 20) }]);
      const f = await file('big.tar', await dockerArchive([big], {}));
      await expect(importImage(small, f, { ref: 'big' })).rejects.toMatchObject({ kind: 'STORE_FULL', http: 503 });
      await expect(small.get('big')).rejects.toMatchObject({ kind: 'NOT_FOUND' });
      expect(await readdir(join(layersRoot(dir), 'tmp'))).toEqual([]);
      expect(await readdir(join(layersRoot(dir), 'sha256')).catch(() => [])).toEqual([]);
    } finally {
      execFileSync('umount', [dir]);
    }
  });

  it('removes a template and the layers no other template holds; holds those of sandboxes running from it until they end', async () => {
    const only = await importImage(
      store,
      await file('only.tar', await dockerArchive([await tarOf([...busyboxLayer(), { name: 'only-here', content: '1' }])], {})),
      { ref: 'only' },
    );
    const unique = only.layers[0]!;
    expect(await layerDirs()).toContain(unique.slice(7));
    await store.remove('only', async () => ['sb-1']);
    await expect(store.get('only')).rejects.toMatchObject({ kind: 'NOT_FOUND' });
    // Held for sb-1: neither the removal nor a collection (a restart's) takes it; another store (the next start) reads the hold.
    expect(await store.collectGarbage()).toEqual([]);
    expect(await new TemplateStore(rig().dataDir).collectGarbage()).toEqual([]);
    expect(await layerDirs()).toContain(unique.slice(7));
    expect(await store.releaseHolds(async (id) => id === 'sb-1')).toEqual([]);
    expect(await layerDirs()).toContain(unique.slice(7));
    expect(await store.releaseHolds(async () => false)).toEqual(['sb-1']);
    expect(await layerDirs()).not.toContain(unique.slice(7));
    expect(await store.releaseHolds(async () => false)).toEqual([]);
    expect(await layerDirs()).toContain(only.layers[1]!.slice(7)); // the base layer: bb still holds it
    const persisted = new TemplateStore(rig().dataDir);
    expect((await persisted.listTemplates()).map((t) => t.name).sort()).toEqual(['bb', 'bb:oci', 'host']);
    const indexFile = join(rig().dataDir, 'templates', 'index.json');
    expect(await readFile(indexFile, 'utf8')).not.toContain('only:latest');
    // An edit of index.json from outside (an operator registering a directory) is seen by a running store.
    const index = JSON.parse(await readFile(indexFile, 'utf8')) as Record<string, unknown>;
    await new Promise((r) => setTimeout(r, 20)); // a distinct mtime
    await writeFile(indexFile, JSON.stringify({ ...index, ext: { rootfs: scratch, registeredAt: new Date().toISOString() } }));
    expect((await store.resolve('ext')).layers).toEqual([scratch]);
  });
});
