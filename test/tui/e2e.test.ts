// The real console (bin/cubectl-tui, built) in tmux against a real cubed: a sandbox created
// through the API appears; `r` changes the release ratio and the density shown; `d` drains
// the node after the confirmation. Needs `npm run build`. Conditions are polled (bounded).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CubeClient } from '../../src/cli/client.js';
import { startDaemon, type TestDaemon } from '../helpers/daemon.js';
import { BIN, tmuxConsole } from './tmux.js';

const { start, keys, until, ended, kill } = tmuxConsole(`cube-tui-e2e-${process.pid}`);

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
    start(120, 40, { CUBE_API_KEY: d.apiKey, TERM: 'xterm-256color' }, `${process.execPath} ${BIN} --api ${d.url} --skin mono`);
    try {
      let s = await until('the node, live', (x) => x.includes('LIVE') && x.includes(d.nodeID));
      expect(row(s, d.nodeID)).toMatch(/HEALTHY +yes/);
      for (const l of s.split('\n')) expect(l.length).toBeLessThanOrEqual(120);

      const sb = await api.createSandbox({ timeoutSec: 300 });
      await api.pause(sb.sandboxID);
      keys('2');
      s = await until('the paused sandbox', (x) => row(x, sb.sandboxID).includes('paused'));
      // 120 columns hold the live-use columns, not TEMPLATE (it goes right after NET RX/TX): the
      // row has id, node and state; the template is in the selected row's detail line, and `w`
      // (wide mode) brings its column back.
      expect(row(s, sb.sandboxID)).toMatch(new RegExp(`^${sb.sandboxID} +${d.nodeID.slice(0, 14)}\\S* +paused `));
      expect(s).toContain(`${sb.sandboxID} paused | host on ${d.nodeID}`);
      keys('w');
      s = await until('the wide table', (x) => /^SANDBOX +TEMPLATE +NODE +STATE/m.test(x));
      expect(row(s, sb.sandboxID)).toMatch(new RegExp(`^${sb.sandboxID} +host +${d.nodeID.slice(0, 8)}\\S* +paused `));
      keys('w');
      await until('the table as it fits again', (x) => /^SANDBOX +NODE +STATE/m.test(x));

      keys('1');
      // One paused sandbox; with ratio 0 pausing frees nothing: its whole footprint is in use.
      s = await until('the node counting it paused', (x) => /HEALTHY +yes .* 1 \//.test(row(x, d.nodeID)) && row(x, d.nodeID).includes(' 302Mi/'));
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
      // It holds the other quarter now.
      s = await until('the new footprint in the row', (x) => row(x, d.nodeID).includes(' 76Mi/'));
      expect((await api.config()).version).toBeGreaterThan(1);

      keys('d');
      await until('the drain confirmation', (x) => x.includes(`Drain node ${d.nodeID}?`));
      keys('y');
      // A healthy node being drained says DRAINING where it said HEALTHY (and why it takes nothing).
      s = await until('the node draining', (x) => /DRAINING +no: drain/.test(row(x, d.nodeID)));
      expect((await api.node(d.nodeID)).draining).toBe(true);

      // q ends the console, and with it the session's only pane.
      keys('q');
      await ended('q');
    } finally {
      kill();
    }
  });
});
