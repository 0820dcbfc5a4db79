// A shell in a sandbox (issue 28 item 3) at 80x24 against a real cubed: the console's `a` hands the
// terminal to a shell in the selected sandbox (a PTY through envd) and comes back, redrawn, when it
// exits; a paused sandbox gets a status line and no shell; a daemon that goes away mid-shell ends
// it with a one-line reason and the console comes back. `cubectl sandbox shell` is the same code.
// Needs `npm run build`.
import { resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { CubeClient } from '../../src/cli/client.js';
import { fileDaemon } from '../helpers/file-daemon.js';
import { BIN, tmuxConsole } from './tmux.js';

const CUBECTL = resolve(import.meta.dirname, '../../bin/cubectl');
const f = fileDaemon();
const row = (s: string, id: string) => s.split('\n').find((l) => l.startsWith(`${id} `)) ?? '';
/** The shell's answer: a line that is 42 alone (the command line echoed above it spells $((6*7))). */
const answered = (s: string) => /^42\s*$/m.test(s);

describe('a shell in a sandbox at 80x24', () => {
  it('opens on a, runs a command, comes back on exit; a paused sandbox gets a line; a daemon gone ends it with a reason', async () => {
    const api = new CubeClient({ baseUrl: f.d.url, apiKey: f.d.apiKey });
    const live = (await api.createSandbox({ timeoutSec: 600 })).sandboxID;
    const paused = (await api.createSandbox({ timeoutSec: 600 })).sandboxID;
    await api.pause(paused);
    const { start, keys, until, filter, ended, kill } = tmuxConsole(`cube-tui-shell-${process.pid}`);
    const only = async (id: string, other: string) => {
      keys('Escape');
      await until('no filter', (x) => !x.includes('filter: /'));
      await filter(id, (x) => row(x, id) !== '' && row(x, other) === '');
    };
    start(80, 24, { CUBE_API_KEY: f.d.apiKey, CUBE_API_URL: f.d.url, TERM: 'xterm-256color' }, `${process.execPath} ${BIN} --skin mono`);
    try {
      keys('2');
      await until('both sandboxes, LIVE', (x) => x.startsWith('LIVE') && / running /.test(row(x, live)) && / paused /.test(row(x, paused)));

      // Paused: one line, and the console stays (nothing suspended).
      await only(paused, live);
      keys('a');
      let s = await until('the refusal', (x) => x.includes(`no shell: sandbox ${paused} is paused`));
      expect(s.startsWith('LIVE')).toBe(true);
      expect(s).not.toContain('[cubectl-tui] shell in');

      // Running: the shell has the terminal; 6*7 is computed in the sandbox; exit brings the console back.
      await only(live, paused);
      keys('a');
      await until('the shell', (x) => x.includes(`[cubectl-tui] shell in ${live}`) && !x.startsWith('LIVE'));
      keys('-l', 'echo $((6*7))');
      keys('Enter');
      await until('42 from the sandbox', answered);
      keys('-l', 'exit');
      keys('Enter');
      s = await until('the console again', (x) => x.startsWith('LIVE') && x.includes(`shell in ${live} ended (exit 0)`) && row(x, live) !== '');
      for (const l of s.split('\n')) expect(l.length).toBeLessThanOrEqual(80);
      expect(s.split('\n')[2]).toContain('2:sandboxes');
      // Keys work again (the console has the keyboard back): ? opens help.
      keys('?');
      await until('help', (x) => x.includes('General'));
      keys('Escape');

      // The daemon goes away mid-shell: the shell ends with the reason, the console is back, LIVE again once cubed is.
      keys('a');
      await until('the second shell', (x) => x.includes(`[cubectl-tui] shell in ${live}`) && !x.startsWith('LIVE'));
      keys('-l', 'echo $((6*7))');
      keys('Enter');
      await until('42 again', answered);
      await f.d.restart();
      s = await until('the console back with the reason', (x) => x.includes(`shell in ${live} ended: `) && /^(LIVE|STALE|CONNECTING)/.test(x), 30_000);
      expect(s.replace(/\s+/g, ' ')).toMatch(new RegExp(`shell in ${live} ended: .*(connection to cubed|cubed does not answer)`));
      await until('LIVE again', (x) => x.startsWith('LIVE') && row(x, live) !== '', 30_000);
      keys('q');
      await ended('q');
    } finally {
      kill();
      await api.deleteSandbox(live);
      await api.deleteSandbox(paused);
    }
  }, 240_000);

  it('cubectl sandbox shell: the same shell, its exit code; a paused sandbox refused with the reason', async () => {
    const api = new CubeClient({ baseUrl: f.d.url, apiKey: f.d.apiKey });
    const live = (await api.createSandbox({ timeoutSec: 600 })).sandboxID;
    const paused = (await api.createSandbox({ timeoutSec: 600 })).sandboxID;
    await api.pause(paused);
    const { start, keys, until, kill } = tmuxConsole(`cube-cli-shell-${process.pid}`);
    const cubectl = `${process.execPath} ${CUBECTL}`;
    start(
      80,
      24,
      { CUBE_API_KEY: f.d.apiKey, CUBE_API_URL: f.d.url, TERM: 'xterm-256color' },
      `sh -c '${cubectl} sandbox shell ${paused}; echo "paused-exit=$?"; ${cubectl} sandbox shell ${live}; echo "live-exit=$?"; sleep 60'`,
    );
    try {
      await until('the refusal and its exit code', (x) => x.includes(`sandbox ${paused} is paused`) && x.includes('paused-exit=1'));
      await until('a prompt', (x) => x.includes('paused-exit=1') && /[$#] *$/m.test(x.split('paused-exit=1')[1] ?? ''));
      keys('-l', 'echo $((6*7))');
      keys('Enter');
      await until('42 from the sandbox', answered);
      keys('-l', 'exit 3');
      keys('Enter');
      await until("the shell's exit code", (x) => x.includes('live-exit=3'));
    } finally {
      kill();
      await api.deleteSandbox(live);
      await api.deleteSandbox(paused);
    }
  }, 120_000);
});
