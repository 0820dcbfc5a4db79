// Drill-down at 80x24 against a real cubed (issue 16 item 3): `x` runs a command in the
// selected sandbox and its output shows in the sandbox's describe pane, `l` brings its logs
// from the daemon history, `s`/`S` sort the table (the header marks the column), and marks show
// on the rows with a count while space moves down. Needs `npm run build`.
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { CubeClient } from '../../src/cli/client.js';
import { fileDaemon } from '../helpers/file-daemon.js';
import { BIN, tmuxConsole } from './tmux.js';

const f = fileDaemon();
const { start, keys, until, filter, ended, kill } = tmuxConsole(`cube-tui-drill-${process.pid}`);
/** Sandbox ids in the order of the table's rows (rows have the id then padding; the detail line has one space). */
const rowOrder = (s: string, ids: string[]) => s.split('\n').flatMap((l) => ids.filter((id) => l.startsWith(`${id} `) && /^\S+ {2,}/.test(l)));

describe('cubectl-tui drill-down at 80x24', () => {
  it('runs a command and reads the logs from the describe pane, sorts, marks with a count', async () => {
    const api = new CubeClient({ baseUrl: f.d.url, apiKey: f.d.apiKey });
    const ids: string[] = [];
    for (let i = 0; i < 2; i++) ids.push((await api.createSandbox({ timeoutSec: 300 })).sandboxID);
    ids.sort();
    start(80, 24, { CUBE_API_KEY: f.d.apiKey, CUBE_API_URL: f.d.url, TERM: 'xterm-256color' }, `${process.execPath} ${BIN} --skin mono`);
    try {
      keys('2');
      let s = await until('the sandboxes', (x) => x.includes('LIVE') && ids.every((id) => x.includes(id)));
      expect(rowOrder(s, ids)).toEqual(ids);

      keys('s');
      s = await until('sorted by id', (x) => /^SANDBOX\^/m.test(x) && x.includes('sandboxes sorted by SANDBOX ascending'));
      keys('S');
      s = await until('reversed', (x) => /^SANDBOXv/m.test(x));
      expect(rowOrder(s, ids)).toEqual([...ids].reverse());

      // Space marks the selected row (the first shown: ids[1]) and moves to the next.
      keys('g', 'Space');
      s = await until('one marked', (x) => x.includes('1 marked'));
      expect(s).toMatch(new RegExp(`^${ids[1]} +\\* `, 'm'));
      expect(s.split('\n').join(' ')).toContain(`${ids[0]} running |`);

      // x on the selected sandbox: a prompt, then its output in the describe pane.
      keys('x');
      await until('the exec prompt', (x) => x.includes(`run in ${ids[0]}`));
      keys('-l', 'echo cube-$((6*7)); id -un');
      keys('Enter');
      s = await until('the output in the describe pane', (x) => x.includes(`sandbox ${ids[0]}`) && x.includes('cube-42') && x.includes('[exit 0]'));
      expect(s).toContain('$ echo cube-$((6*7)); id -un');
      for (const l of s.split('\n')) expect(l.length).toBeLessThanOrEqual(80);

      // l in the pane: the lifecycle from the daemon's history.
      keys('l');
      s = await until('the logs', (x) => /sandbox\.created: /.test(x) && x.includes('event(s) from the daemon history'));
      keys('Escape');
      await until('the table again', (x) => /^SANDBOXv/m.test(x));
      keys('q');
      await ended('q');
    } finally {
      kill();
      for (const id of ids) await api.deleteSandbox(id).catch(() => {});
    }
  });

  it('marks the keys that need a restart, edits a live one, and says a rejected config file on disk in the header until it is fixed', async () => {
    const file = join(f.d.configDir, 'cubemaster.yaml');
    const good = readFileSync(file, 'utf8');
    start(80, 24, { CUBE_API_KEY: f.d.apiKey, CUBE_API_URL: f.d.url, TERM: 'xterm-256color' }, `${process.execPath} ${BIN} --skin mono`);
    try {
      await until('live', (x) => x.includes('LIVE'));
      // The config view says which keys wait for a restart.
      keys('5');
      // The path keeps its end at 80 columns (`~...network.tap_init_num`): the row ends `restart  <from>  <n>`.
      let s = await filter('tap_init', (x) => /^~\S*\.tap_init_num +restart +\S+ +\d+$/m.test(x));
      expect(s).toMatch(/^PATH +APPLIES +FROM +VALUE/m);
      // A live key is edited in place: the daemon validates, persists and applies it.
      await filter('disk_usage_max');
      keys('e');
      await until('the edit prompt', (x) => x.includes('scheduler.disk_usage_max_percent (now 80), applied live'));
      keys('C-u');
      keys('-l', '85');
      keys('Enter');
      await until('the outcome', (x) => x.includes('scheduler.disk_usage_max_percent: 80 -> 85 applied'));
      expect(readFileSync(file, 'utf8')).toMatch(/disk_usage_max_percent: 85/);
      keys('Escape', '1');
      const edited = readFileSync(file, 'utf8');
      writeFileSync(file, `${edited}\nnot_a_section: 1\n`);
      s = await until('the rejection in the header', (x) => x.split('\n')[2]?.startsWith('CONFIG ON DISK REJECTED (v') ?? false);
      expect(s.split('\n')[2]).toMatch(/stays, since \d\d:\d\d:\d\d\): not_a_section/);
      for (const l of s.split('\n')) expect(l.length).toBeLessThanOrEqual(80);
      writeFileSync(file, edited);
      await until('the header without it', (x) => !x.includes('CONFIG ON DISK REJECTED') && x.includes('LIVE'));
      keys('q');
      await ended('q');
    } finally {
      writeFileSync(file, good);
      kill();
    }
  });
});
