// The real console (bin/cubectl-tui, built) in tmux against a real cubed: a sandbox created
// through the API appears; `r` changes the release ratio and the density shown; `d` drains
// the node after the confirmation. Needs `npm run build`. Conditions are polled (bounded).
import { execFileSync } from 'node:child_process';
import { resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CubeClient } from '../../src/cli/client.js';
import { startDaemon, type TestDaemon } from '../helpers/daemon.js';

const BIN = resolve(import.meta.dirname, '../../bin/cubectl-tui');
const SESSION = `cube-tui-e2e-${process.pid}`;

const tmux = (...args: string[]) => execFileSync('tmux', args, { encoding: 'utf8' });
const screen = () => tmux('capture-pane', '-p', '-t', SESSION);
const keys = (...k: string[]) => tmux('send-keys', '-t', SESSION, ...k);

async function until(what: string, pred: (s: string) => boolean, timeoutMs = 20_000): Promise<string> {
  const end = Date.now() + timeoutMs;
  let s = '';
  for (;;) {
    s = screen();
    if (pred(s)) return s;
    if (Date.now() > end) throw new Error(`console never showed ${what}; screen:\n${s}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

const alive = () => {
  try {
    tmux('has-session', '-t', SESSION);
    return true;
  } catch {
    return false;
  }
};

const row = (s: string, start: string) => s.split('\n').find((l) => l.startsWith(start)) ?? '';

let d: TestDaemon;
let api: CubeClient;

beforeAll(async () => {
  d = await startDaemon();
  api = new CubeClient({ baseUrl: d.url, apiKey: d.apiKey });
});
afterAll(async () => {
  await d?.stop();
});

describe('cubectl-tui in tmux against a real cubed', () => {
  it('shows a new sandbox, applies a release ratio with the new density, drains the node', async () => {
    tmux('new-session', '-d', '-s', SESSION, '-x', '120', '-y', '40', '-e', `CUBE_API_KEY=${d.apiKey}`, '-e', 'TERM=xterm-256color', `${process.execPath} ${BIN} --api ${d.url} --skin mono`);
    try {
      let s = await until('the node, live', (x) => x.includes('LIVE') && x.includes(d.nodeID));
      expect(row(s, d.nodeID)).toMatch(/HEALTHY +yes/);
      for (const l of s.split('\n')) expect(l.length).toBeLessThanOrEqual(120);

      const sb = await api.createSandbox({ timeoutSec: 300 });
      await api.pause(sb.sandboxID);
      keys('2');
      s = await until('the paused sandbox', (x) => row(x, sb.sandboxID).includes('paused'));
      expect(row(s, sb.sandboxID)).toMatch(new RegExp(`${sb.sandboxID} +host +${d.nodeID} +paused`));

      keys('1');
      // One paused sandbox; with ratio 0 pausing frees nothing.
      s = await until('the node counting it paused', (x) => /HEALTHY +yes +1 \//.test(row(x, d.nodeID)) && row(x, d.nodeID).includes(' 1/0Mi '));
      keys('r');
      await until('the ratio prompt', (x) => x.includes('paused_resource_release_ratio (now 0)'));
      keys('C-u');
      keys('-l', '2');
      await until('the range check', (x) => x.includes('must be between 0 and 1'));
      keys('BSpace');
      keys('-l', '0.75');
      s = await until('the preview', (x) => x.includes(`${d.nodeID}: all paused`));
      keys('Enter');
      s = await until('the applied ratio', (x) => x.includes('release ratio 0.75 applied') && x.split('\n')[0]!.endsWith('release ratio 0.75'));
      // 1 paused sandbox of 302 MiB footprint: 0.75 of it is given back.
      expect(s).toMatch(new RegExp(`${d.nodeID}: 1 / \\d+ \\(\\d+ safe\\), all paused \\d+, ratio 0\\.75 frees 227Mi`));
      s = await until('the new density in the row', (x) => row(x, d.nodeID).includes(' 1/227Mi '));
      expect((await api.config()).version).toBeGreaterThan(1);

      keys('d');
      await until('the drain confirmation', (x) => x.includes(`Drain node ${d.nodeID}?`));
      keys('y');
      s = await until('the node draining', (x) => /HEALTHY +no: draining/.test(row(x, d.nodeID)));
      expect((await api.node(d.nodeID)).draining).toBe(true);

      // q ends the console, and with it the session's only pane.
      keys('q');
      const end = Date.now() + 10_000;
      while (alive()) {
        if (Date.now() > end) throw new Error(`q did not end the console; screen:\n${screen()}`);
        await new Promise((r) => setTimeout(r, 100));
      }
    } finally {
      try {
        tmux('kill-session', '-t', SESSION);
      } catch {
        // already gone
      }
    }
  });
});
