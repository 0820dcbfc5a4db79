import { copyFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { CubeError } from '../../src/errors.js';
import { packageRoot } from '../../src/config/loader.js';
import { ConfigStore, type ConfigEvents } from '../../src/config/store.js';

const shipped = join(packageRoot(), 'config');
const NET = 'io.cubelet.internal.v1.network';
let dir: string;
let store: ConfigStore | undefined;

beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'cubed-test-config-'));
  copyFileSync(join(shipped, 'cubemaster.yaml'), join(dir, 'cubemaster.yaml'));
  copyFileSync(join(shipped, 'cubelet.toml'), join(dir, 'cubelet.toml'));
});

afterEach(() => {
  store?.close();
  store = undefined;
  rmSync(dir, { recursive: true, force: true });
});

const master = () => join(dir, 'cubemaster.yaml');
const cubelet = () => join(dir, 'cubelet.toml');
const edit = (path: string, from: string | RegExp, to: string) => {
  const text = readFileSync(path, 'utf8');
  const next = text.replace(from, to);
  expect(next).not.toBe(text);
  writeFileSync(path, next);
};
const next = <K extends keyof ConfigEvents>(s: ConfigStore, event: K) =>
  new Promise<ConfigEvents[K]>((resolve) => {
    const off = s.on(event, (p) => {
      off();
      resolve(p);
    });
  });

describe('ConfigStore', () => {
  it('loads the defaults at version 1 and refuses an invalid directory at start', () => {
    store = new ConfigStore(dir, { watch: false });
    expect(store.versionInfo.version).toBe(1);
    expect(store.previous).toBeUndefined();
    expect(store.config.master.host.quota.paused_resource_release_ratio).toBe(0);
    edit(master(), 'paused_resource_release_ratio: 0', 'paused_resource_release_ratio: 1.5');
    expect(() => new ConfigStore(dir, { watch: false })).toThrow('host.quota.paused_resource_release_ratio: must be between 0 and 1');
  });

  it('resumes the numbering of a stored history, never going back, and keeps the version in force when the files give its config', () => {
    store = new ConfigStore(dir, { watch: false });
    expect(store.resumeNumbering(undefined, 7)).toBe(true);
    expect(store.versionInfo.version).toBe(8);
    expect(store.resumeNumbering(undefined, 3)).toBe(true);
    expect(store.versionInfo.version).toBe(8);
    const files = store.config;
    expect(store.resumeNumbering({ version: 5, config: structuredClone(files) }, 9)).toBe(false);
    expect(store.versionInfo.version).toBe(5);
    const other = structuredClone(files);
    other.master.host.quota.paused_resource_release_ratio = 0.5;
    expect(store.resumeNumbering({ version: 5, config: other }, 9)).toBe(true);
    expect(store.versionInfo.version).toBe(10);
  });

  it('an emptied file (a writer between truncate and write) is rejected and the config kept', async () => {
    store = new ConfigStore(dir, { watch: false });
    writeFileSync(master(), '');
    const r = await store.reload();
    expect(r.ok).toBe(false);
    expect(r.error!.map((e) => e.message).join()).toMatch(/file is empty/);
    expect(store.versionInfo.version).toBe(1);
  });

  it('treats missing files as defaults', () => {
    rmSync(master());
    rmSync(cubelet());
    store = new ConfigStore(dir, { watch: false });
    expect(store.config.master.scheduler.node_max_mvm_num).toBe(3000);
    expect(store.config.cubelet.runtime).toBe('ns');
  });

  it('explicit reload: applies a valid change with a field diff, bumps the version, keeps the previous', async () => {
    store = new ConfigStore(dir, { watch: false });
    const before = store.config;
    edit(master(), 'paused_resource_release_ratio: 0', 'paused_resource_release_ratio: 0.75');
    edit(master(), 'listen: 127.0.0.1:3000', 'listen: 0.0.0.0:3001');
    const changed = next(store, 'change');
    const r = await store.reload();
    expect(r).toEqual({
      ok: true,
      version: 2,
      changes: [
        { path: 'api.listen', from: '127.0.0.1:3000', to: '0.0.0.0:3001', needsRestart: true },
        { path: 'host.quota.paused_resource_release_ratio', from: 0, to: 0.75, needsRestart: false },
      ],
    });
    expect((await changed).changes).toEqual(r.changes);
    expect(store.config.master.host.quota.paused_resource_release_ratio).toBe(0.75);
    expect(store.previous?.version).toBe(1);
    expect(store.previous?.config).toBe(before);
    expect(before.master.host.quota.paused_resource_release_ratio).toBe(0);
    expect(Object.isFrozen(store.config.master.host.quota)).toBe(true);
  });

  it('an unchanged reload reports no change and keeps the version', async () => {
    store = new ConfigStore(dir, { watch: false });
    expect(await store.reload()).toEqual({ ok: true, version: 1, changes: [] });
  });

  it('rejects an invalid file with path and reason and keeps the old config', async () => {
    store = new ConfigStore(dir, { watch: false });
    const kept = store.config;
    edit(master(), 'paused_resource_release_ratio: 0', 'paused_resource_release_ratio: 1.5');
    edit(cubelet(), 'tap_init_num = 32', 'tap_init_num = "many"\nbogus = 1');
    const rejected = next(store, 'rejected');
    const r = await store.reload();
    expect(r.ok).toBe(false);
    expect(r.version).toBe(1);
    expect(r.error).toEqual([
      { path: 'host.quota.paused_resource_release_ratio', message: 'must be between 0 and 1' },
      { path: `plugins."${NET}".tap_init_num`, message: 'expected number, received string' },
      { path: `plugins."${NET}".bogus`, message: 'unknown key' },
    ]);
    expect((await rejected).kept.version).toBe(1);
    expect(store.config).toBe(kept);
  });

  it('a removed file is rejected (the config in force stays) until it is back', async () => {
    store = new ConfigStore(dir, { watch: false });
    await store.set('scheduler.priority_select_num', 5);
    const text = readFileSync(master(), 'utf8');
    rmSync(master());
    const r = await store.reload();
    expect(r.ok).toBe(false);
    expect(r.error).toEqual([{ path: 'cubemaster.yaml', message: expect.stringMatching(/^file was removed; the config in force stays/) }]);
    expect(store.config.master.scheduler.priority_select_num).toBe(5);
    writeFileSync(master(), text);
    expect(await store.reload()).toEqual({ ok: true, version: 2, changes: [] });
  });

  it('reports a syntax error with the file and line', async () => {
    store = new ConfigStore(dir, { watch: false });
    writeFileSync(cubelet(), 'node_id = \n');
    const r = await store.reload();
    expect(r.ok).toBe(false);
    expect(r.error?.[0]?.path).toBe('cubelet.toml');
    expect(r.error?.[0]?.message).toMatch(/^line 1, column \d+: /);
    writeFileSync(master(), 'api: [1\nhost: 2\n');
    expect((await store.reload()).error?.[0]?.path).toBe('cubemaster.yaml');
  });

  it('hot reload: a file change on disk is applied without a call', async () => {
    store = new ConfigStore(dir, { pollMs: 200 });
    const changed = next(store, 'change');
    edit(master(), 'node_max_cpu_util: 80', 'node_max_cpu_util: 90');
    const e = await changed;
    expect(e.changes).toEqual([{ path: 'scheduler.node_max_cpu_util', from: 80, to: 90, needsRestart: false }]);
    expect(e.current.version).toBe(2);
    expect(store.config.master.scheduler.node_max_cpu_util).toBe(90);
  });

  it('hot reload: an editor-style replace (rename over the file) is seen, and a restart-only field is flagged', async () => {
    store = new ConfigStore(dir, { pollMs: 200 });
    const changed = next(store, 'change');
    const text = readFileSync(cubelet(), 'utf8').replace('tap_init_num = 32', 'tap_init_num = 64');
    writeFileSync(join(dir, '.cubelet.toml.swp'), text);
    const { renameSync } = await import('node:fs');
    renameSync(join(dir, '.cubelet.toml.swp'), cubelet());
    expect((await changed).changes).toEqual([{ path: `plugins."${NET}".tap_init_num`, from: 32, to: 64, needsRestart: true }]);
  });

  it('hot reload: an invalid file on disk is rejected once and the old config stays', async () => {
    store = new ConfigStore(dir, { pollMs: 200 });
    const rejected = next(store, 'rejected');
    edit(master(), 'mem_oversell_ratio: 2', 'mem_oversell_ratio: 0.5');
    expect((await rejected).errors).toEqual([{ path: 'host.quota.mem_oversell_ratio', message: 'Too small: expected number to be >=1' }]);
    expect(store.config.master.host.quota.mem_oversell_ratio).toBe(2);
    // The view says so until the files validate again (the console's header).
    expect(store.view().rejected).toMatchObject({ errors: [{ path: 'host.quota.mem_oversell_ratio' }] });
    // Fixing the file brings the change in.
    const changed = next(store, 'change');
    edit(master(), 'mem_oversell_ratio: 0.5', 'mem_oversell_ratio: 3');
    expect((await changed).changes.map((c) => [c.path, c.to])).toEqual([['host.quota.mem_oversell_ratio', 3]]);
    expect(store.view()).not.toHaveProperty('rejected');
  });

  it('view(): says which keys the files set (the rest are defaults) and the overrides the daemon reports', async () => {
    writeFileSync(master(), 'api:\n  listen: 127.0.0.1:3000\n');
    writeFileSync(cubelet(), '');
    store = new ConfigStore(dir, { watch: false });
    expect(store.view().inFile).toEqual(['master.api.listen']);
    expect(store.view()).not.toHaveProperty('overrides');
    store.setOverrides([{ path: 'master.api.listen', value: '127.0.0.1:4123', from: '--listen' }]);
    expect(store.view().overrides).toEqual([{ path: 'master.api.listen', value: '127.0.0.1:4123', from: '--listen' }]);
    await store.set('api.rate_limit_per_sec', 50);
    expect(store.view().inFile).toEqual(['master.api.listen', 'master.api.rate_limit_per_sec']);
    expect(store.view().overrides).toHaveLength(1);
  });

  it('a rejected file fixed by set() clears the rejection; one fixed back to the config in force does too', async () => {
    store = new ConfigStore(dir, { watch: false });
    edit(master(), 'mem_oversell_ratio: 2', 'mem_oversell_ratio: 0.5');
    expect((await store.reload()).ok).toBe(false);
    expect(store.view().rejected?.errors).toHaveLength(1);
    await store.set('host.quota.mem_oversell_ratio', 2);
    expect(store.view()).not.toHaveProperty('rejected');
    edit(master(), 'mem_oversell_ratio: 2', 'mem_oversell_ratio: 0.5');
    expect((await store.reload()).ok).toBe(false);
    edit(master(), 'mem_oversell_ratio: 0.5', 'mem_oversell_ratio: 2');
    expect(await store.reload()).toMatchObject({ ok: true, changes: [] });
    expect(store.view()).not.toHaveProperty('rejected');
  });

  it('set(): validates, persists to the YAML file with comments kept, applies live', async () => {
    store = new ConfigStore(dir, { watch: false });
    const r = await store.set('host.quota.paused_resource_release_ratio', 0.75);
    expect(r).toEqual({ ok: true, version: 2, changes: [{ path: 'host.quota.paused_resource_release_ratio', from: 0, to: 0.75, needsRestart: false }] });
    const text = readFileSync(master(), 'utf8');
    expect(text).toMatch(/paused_resource_release_ratio: 0\.75 +# share of a paused sandbox/);
    expect(text).toContain('# cubemaster.yaml: API, scheduler and quota settings');
    // Round trip: a fresh store reads what set() wrote.
    const again = new ConfigStore(dir, { watch: false });
    expect(again.config).toEqual(store.config);
  });

  it('set(): an invalid value throws CONFIG_INVALID with path: reason and changes neither file nor config', async () => {
    store = new ConfigStore(dir, { watch: false });
    const before = readFileSync(master(), 'utf8');
    const err = await store.set('host.quota.paused_resource_release_ratio', 1.5).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(CubeError);
    expect((err as CubeError).code).toBe(130483);
    expect((err as CubeError).message).toBe('host.quota.paused_resource_release_ratio: must be between 0 and 1');
    await expect(store.set('host.quota.nope', 1)).rejects.toThrow('host.quota.nope: unknown key');
    expect(readFileSync(master(), 'utf8')).toBe(before);
    expect(store.versionInfo.version).toBe(1);
  });

  it('set(): TOML keys, with comments kept, including a table the file does not have yet', async () => {
    store = new ConfigStore(dir, { watch: false });
    await store.set(`plugins.${NET}.allow_host_access`, true);
    const r = await store.set('quota.cpus', 8);
    expect(r.changes).toEqual([{ path: 'quota.cpus', from: undefined, to: 8, needsRestart: false }]);
    const text = readFileSync(cubelet(), 'utf8');
    expect(text).toMatch(/allow_host_access = true +# let sandboxes reach/);
    expect(text).toContain('# cubelet.toml: the node agent');
    const again = new ConfigStore(dir, { watch: false });
    expect(again.config.cubelet.quota).toEqual({ cpus: 8 });
    expect(again.config.cubelet.plugins[NET].allow_host_access).toBe(true);
  });

  it('set() on a watched store is not reported a second time by the watcher', async () => {
    store = new ConfigStore(dir, { pollMs: 100 });
    const versions: number[] = [];
    store.on('reload', (r) => versions.push(r.version));
    await store.set('scheduler.priority_select_num', 5);
    // A later real edit is still picked up, and is the only other reload.
    const changed = next(store, 'change');
    edit(master(), 'realtime_create_num: 100', 'realtime_create_num: 50');
    await changed;
    expect(versions).toEqual([2, 3]);
  });
});

describe("following a config kept elsewhere (a cluster's store)", () => {
  it('withValue validates one key over the config in force and changes nothing', () => {
    store = new ConfigStore(dir, { watch: false });
    const before = readFileSync(master(), 'utf8');
    const next = store.withValue('host.quota.paused_resource_release_ratio', 0.25);
    expect(next.master.host.quota.paused_resource_release_ratio).toBe(0.25);
    expect(store.config.master.host.quota.paused_resource_release_ratio).not.toBe(0.25);
    expect(readFileSync(master(), 'utf8')).toBe(before);
    expect(() => store!.withValue('host.quota.paused_resource_release_ratio', 7)).toThrow(CubeError);
    expect(() => store!.withValue('no.such.key', 1)).toThrow(/no\.such\.key|unknown/);
  });

  it('a file edit over an adopted version changes the keys edited, not the others the file holds', async () => {
    store = new ConfigStore(dir, { watch: false });
    await store.adopt(5, store.withValue('host.quota.paused_resource_release_ratio', 0.25));
    edit(cubelet(), 'tap_init_num = 32', 'tap_init_num = 16');
    const r = await store.reload();
    expect(r).toMatchObject({ ok: true, version: 6, changes: [{ path: `plugins."${NET}".tap_init_num`, from: 32, to: 16 }] });
    // The file's own ratio (0) does not undo the adopted one.
    expect(store.config.master.host.quota.paused_resource_release_ratio).toBe(0.25);
    expect(store.config.cubelet.plugins[NET].tap_init_num).toBe(16);
  });

  it('adopt puts a given version in force and reports what changed', async () => {
    store = new ConfigStore(dir, { watch: false });
    const changed = next(store, 'change');
    const r = await store.adopt(17, store.withValue('host.quota.paused_resource_release_ratio', 0.25));
    expect(r).toMatchObject({ ok: true, version: 17, changes: [{ path: 'host.quota.paused_resource_release_ratio', to: 0.25 }] });
    expect((await changed).current.version).toBe(17);
    expect(store.versionInfo.version).toBe(17);
    expect((await store.adopt(17, store.config)).changes).toEqual([]);
  });
});

describe('restart keys pending', () => {
  it('says which restart keys in force are not the ones this process started with, until they are put back', async () => {
    store = new ConfigStore(dir, { watch: false });
    expect(store.view().restartPending).toBeUndefined();
    edit(cubelet(), 'tap_init_num = 32', 'tap_init_num = 8');
    expect((await store.reload()).ok).toBe(true);
    expect(store.view().restartPending).toEqual([{ path: `cubelet.plugins.${NET}.tap_init_num`, running: 32 }]);
    edit(cubelet(), 'tap_init_num = 8', 'tap_init_num = 32');
    await store.reload();
    expect(store.view().restartPending).toBeUndefined();
  });
});
