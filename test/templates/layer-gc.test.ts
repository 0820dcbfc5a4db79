// Layer garbage collection (TemplateStore.collectGarbage, run at every start): layers no template
// holds leave the store with their tree digests; layers a template holds stay; it waits for a
// writer (an import, build or fetch taking layers) to finish first.
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEFAULT_CONFIG, layerDir, layersRoot, TemplateStore } from '../../src/templates/store.js';

let dataDir: string;
const digest = (c: string) => `sha256:${c.repeat(64)}`;

async function layer(store: TemplateStore, d: string): Promise<void> {
  await mkdir(join(layerDir(store.dataDir, d), 'etc'), { recursive: true });
  await writeFile(`${layerDir(store.dataDir, d)}.tree`, `${d}\n`);
}

beforeAll(async () => {
  dataDir = await mkdtemp(join(tmpdir(), 'cubed-test-layer-gc-'));
});
afterAll(() => rm(dataDir, { recursive: true, force: true }));

describe('collectGarbage', () => {
  it('removes the layers no template holds (and stray tree digests), keeps the held ones, and waits for a writer', async () => {
    const store = new TemplateStore(dataDir);
    for (const c of ['a', 'b', 'c']) await layer(store, digest(c));
    await store.put({ name: 'keep', tag: 'latest', ref: 'keep:latest', layers: [digest('a')], config: DEFAULT_CONFIG, source: 'oci' });
    await writeFile(join(layersRoot(dataDir), 'sha256', `${'d'.repeat(64)}.tree`), `${digest('d')}\n`);
    // A writer holding the lock registers c while the collection waits: c must survive.
    let release: (() => void) | undefined;
    const writer = store.exclusive(async () => {
      await new Promise<void>((r) => (release = r));
      await store.putLocked({ name: 'late', tag: 'latest', ref: 'late:latest', layers: [digest('c')], config: DEFAULT_CONFIG, source: 'build' });
    });
    const gc = store.collectGarbage();
    while (!release) await new Promise((r) => setImmediate(r));
    release();
    await writer;
    expect(await gc).toEqual([digest('b')]);
    expect([digest('a'), digest('b'), digest('c')].map((d) => existsSync(layerDir(dataDir, d)))).toEqual([true, false, true]);
    expect(existsSync(`${layerDir(dataDir, digest('b'))}.tree`)).toBe(false);
    expect(existsSync(`${layerDir(dataDir, digest('a'))}.tree`)).toBe(true);
    expect(existsSync(join(layersRoot(dataDir), 'sha256', `${'d'.repeat(64)}.tree`))).toBe(false);
    expect(await store.collectGarbage()).toEqual([]);
  });
});
