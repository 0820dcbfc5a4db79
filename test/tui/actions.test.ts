// The console's actions against a real cubed: what the operator reads in the flash line
// after R (diff, or the validation error with the old config kept), r (new density), node
// and sandbox actions. Needs `npm run build`.
import { readFileSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parse, stringify } from 'yaml';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CubeClient } from '../../src/cli/client.js';
import { createActions, type Actions } from '../../src/tui/actions.js';
import { createConsoleStore, type ConsoleStore } from '../../src/tui/store.js';
import { startDaemon, type TestDaemon } from '../helpers/daemon.js';

let d: TestDaemon;
let store: ConsoleStore;
let actions: Actions;
const flashOf = () => store.getState().ui.flash;

beforeAll(async () => {
  d = await startDaemon();
  store = createConsoleStore({ apiUrl: d.url });
  actions = createActions({ baseUrl: d.url, apiKey: d.apiKey }, store);
});
afterAll(async () => {
  await d?.stop();
});

function editMaster(edit: (m: { scheduler: Record<string, unknown> }) => void): void {
  const path = join(d.configDir, 'cubemaster.yaml');
  const m = parse(readFileSync(path, 'utf8')) as { scheduler: Record<string, unknown> };
  edit(m);
  // As editors do (write a copy, rename over): the daemon's watcher never reads half a file.
  writeFileSync(`${path}.tmp`, stringify(m));
  renameSync(`${path}.tmp`, path);
}

describe('console actions against a real cubed', () => {
  it('R: a rejected file keeps the old config and says why; a valid one shows the diff', async () => {
    const before = (await new CubeClient({ baseUrl: d.url, apiKey: d.apiKey }).config()).version;
    editMaster((m) => (m.scheduler.disk_usage_max_percent = 150));
    await actions.reload();
    expect(flashOf()).toMatchObject({ level: 'bad', text: `reload rejected, config v${before} kept` });
    expect(flashOf()!.detail.join('\n')).toMatch(/disk_usage_max_percent/);
    editMaster((m) => (m.scheduler.disk_usage_max_percent = 85));
    await actions.reload();
    // The daemon's file watcher may have applied the change before R did: either way v+1 is in force.
    const flash = flashOf()!;
    expect(flash.level).toBe('ok');
    if (flash.text.includes('no change')) {
      expect(flash.text).toBe(`config v${before + 1}: no change on disk`);
    } else {
      expect(flash.text).toBe(`config v${before + 1} loaded: 1 change(s)`);
      expect(flash.detail).toEqual(['scheduler.disk_usage_max_percent: 80 -> 85']);
    }
  });

  it('r: the new ratio with the daemon own density numbers; out of range is refused with its code', async () => {
    await actions.setReleaseRatio(0.5, d.nodeID);
    expect(flashOf()!.text).toMatch(/^release ratio 0\.5 applied \(config v\d+\)$/);
    expect(flashOf()!.detail).toEqual([
      expect.stringMatching(new RegExp(`^${d.nodeID}: 0 / \\d+ \\(\\d+ safe\\), all paused \\d+, ratio 0\\.5 frees 0Mi, headroom \\d+$`)),
    ]);
    await actions.setReleaseRatio(1.5);
    expect(flashOf()).toMatchObject({ level: 'bad' });
    expect(flashOf()!.text).toMatch(/^set release ratio failed: .*130483.*between 0 and 1/);
  });

  it('node and sandbox actions report their outcome', async () => {
    await actions.cordon(d.nodeID);
    expect(flashOf()!.text).toBe(`${d.nodeID} cordoned: not schedulable (cordoned)`);
    await actions.uncordon(d.nodeID);
    expect(flashOf()!.text).toBe(`${d.nodeID} uncordoned: schedulable`);
    await actions.launch({ templateID: 'host', cpus: 1, memoryMiB: 256, timeoutSec: 120, nodeID: d.nodeID });
    const id = /^launched (\S+) on /.exec(flashOf()!.text)![1]!;
    const api = new CubeClient({ baseUrl: d.url, apiKey: d.apiKey });
    await actions.togglePause(await api.sandbox(id));
    expect(flashOf()!.text).toBe(`${id} paused`);
    await actions.togglePause(await api.sandbox(id));
    expect(flashOf()!.text).toBe(`${id} running`);
    await actions.destroy([id, 'nosuchsandbox']);
    expect(flashOf()).toMatchObject({ level: 'bad', text: 'destroyed 1 of 2' });
    expect(flashOf()!.detail[0]).toMatch(/^nosuchsandbox: .*130404/);
    expect(store.getState().ui.busy).toBe('');
  });
});
