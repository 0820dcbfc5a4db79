// Role all records its files as the cluster's config at start (ControlPlaneService.recordFiles).
// A restart on unchanged files is no change: it keeps the version in force (every start
// recorded a new one: a real daemon showed "config v2" after a plain restart). Files changed
// while it was down make exactly one new version.
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import pino from 'pino';
import { afterEach, expect, it } from 'vitest';
import { ConfigStore } from '../../src/config/store.js';
import { ControlPlaneService } from '../../src/control/service.js';
import { inProcessControl } from '../../src/control/wiring.js';
import { EmbeddedStore } from '../../src/store/embedded.js';
import { soloConfigDir } from '../helpers/solo.js';

const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

it('a restart on unchanged files keeps the version in force; changed files (an edit, a set) make one new version each', async () => {
  const dir = soloConfigDir('solo-restart', cleanups);
  const log = pino({ level: 'silent' });

  // One daemon run: its config from the files, its control plane over the store it keeps.
  const run = async (): Promise<{ version: number; stop: () => Promise<void>; cp: ControlPlaneService; config: ConfigStore }> => {
    const config = new ConfigStore(dir, { watch: false });
    const store = new EmbeddedStore({ path: join(dir, 'cubed.db') });
    await store.init();
    const cp = new ControlPlaneService({ store, config, log, replicaID: 'local', ...inProcessControl([]) });
    const stop = async () => {
      await cp.stop();
      config.close();
      await store.close();
    };
    try {
      await cp.start();
    } catch (err) {
      await stop();
      throw err;
    }
    cleanups.push(stop);
    return { version: cp.config().version, stop, cp, config };
  };
  const history = async () => {
    const store = new EmbeddedStore({ path: join(dir, 'cubed.db') });
    await store.init();
    try {
      return (await store.listConfigVersions(100)).map((v) => v.version).sort((a, b) => a - b);
    } finally {
      await store.close();
    }
  };

  const first = await run();
  expect(first.version).toBe(1);
  await first.stop();
  const second = await run();
  expect(second.version).toBe(1);
  await second.stop();
  expect(await history()).toEqual([1]);

  // Edited while down: one new version, kept by the next plain restart.
  const master = join(dir, 'cubemaster.yaml');
  const text = readFileSync(master, 'utf8');
  expect(text).toContain('paused_resource_release_ratio: 0');
  writeFileSync(master, text.replace('paused_resource_release_ratio: 0', 'paused_resource_release_ratio: 0.25'));
  const edited = await run();
  expect(edited.version).toBe(2);
  expect(edited.config.config.master.host.quota.paused_resource_release_ratio).toBe(0.25);
  // A set writes the files and records the next version: the restart after it keeps that.
  expect((await edited.cp.setConfig('host.quota.paused_resource_release_ratio', 0.5)).version).toBe(3);
  await edited.stop();
  const afterSet = await run();
  expect(afterSet.version).toBe(3);
  expect(afterSet.config.config.master.host.quota.paused_resource_release_ratio).toBe(0.5);
  await afterSet.stop();
  expect(await history()).toEqual([1, 2, 3]);
}, 60_000);
