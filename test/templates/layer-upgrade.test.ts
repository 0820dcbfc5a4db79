// A data dir from the version before layers moved into the store (issue 29 item 6): its layers at
// `<data-dir>/layers`, on the data dir's filesystem. A real daemon starting on it moves them into
// its store, and the template keeps working: a sandbox from it sees its files and whiteouts.
import { existsSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { execa } from 'execa';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { importImage, legacyLayersDir, movedLayersDir } from '../../src/templates/layers/import.js';
import { layerDir, layersRoot, TemplateStore } from '../../src/templates/store.js';
import { startDaemon, type TestDaemon } from '../helpers/daemon.js';
import { busyboxLayer, dockerArchive, tarOf } from '../helpers/images.js';
import { sdkClient, type SdkClient } from '../helpers/sdk.js';

let d: TestDaemon;
let sdk: SdkClient;
beforeAll(async () => {
  d = await startDaemon();
  sdk = sdkClient(d);
});
afterAll(async () => {
  await sdk?.killAll().finally(() => d?.stop());
});

describe('a data dir from the version before', () => {
  it('has its layers moved into the store at start; its templates keep working', async () => {
    const top = await tarOf([{ name: 'opt/', type: 'directory' }, { name: 'opt/kept', content: 'from before\n' }, { name: 'bin/.wh.nc' }]);
    const archive = join(d.dataDir, '..', 'image.tar'); // in the daemon's own temporary dir
    await writeFile(archive, await dockerArchive([await tarOf(busyboxLayer()), top], { Env: ['PATH=/bin:/usr/bin'] }));
    // The template as the version before left it: its record, and its layers at <data-dir>/layers.
    const rec = await importImage(new TemplateStore(d.dataDir), archive, { ref: 'old' });
    await execa('mv', [layersRoot(d.dataDir), legacyLayersDir(d.dataDir)]); // mv keeps whiteout devices, as cp -a
    expect(existsSync(layerDir(d.dataDir, rec.layers[1]!))).toBe(false);

    await d.restart();
    for (const l of rec.layers) expect(existsSync(layerDir(d.dataDir, l))).toBe(true);
    expect(existsSync(legacyLayersDir(d.dataDir))).toBe(false);
    expect(existsSync(movedLayersDir(d.dataDir))).toBe(false); // no sandbox was taken back: the old tree is gone
    const sbx = await sdk.create('old');
    const r = await sbx.commands.run('cat /opt/kept; test -e /bin/nc || echo nc-gone; test -e /bin/ls && echo ls-kept', { user: 'root' });
    expect(r.stdout).toBe('from before\nnc-gone\nls-kept\n');
  }, 180_000);
});
