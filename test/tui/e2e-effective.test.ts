// Issue 16 at 80x24 against a real cubed, what session 5 added: the config view shows the
// values the daemon runs with (its --listen and --data-dir over the file's) and where each came
// from; `o` in the events view pages back into the daemon's history past the snapshot's 100;
// the header keeps the create p99 whole; the node's detail line says what the footprint's
// denominator is (the quota, against the host or declared memory). Needs `npm run build`.
import { describe, expect, it } from 'vitest';
import { CubeClient } from '../../src/cli/client.js';
import { fileDaemon } from '../helpers/file-daemon.js';
import { BIN, tmuxConsole } from './tmux.js';

const f = fileDaemon();
const { start, keys, until, filter, ended, kill } = tmuxConsole(`cube-tui-effective-${process.pid}`);
/** The screen's lines joined: the detail lines wrap at 80. */
const flat = (s: string) =>
  s
    .split('\n')
    .map((l) => l.trimEnd())
    .join(' ');

describe('cubectl-tui at 80x24: effective config, event history, header, footprint', () => {
  it('shows flag overrides with their source, pages back to the first event, keeps p99 and names the quota', async () => {
    const api = new CubeClient({ baseUrl: f.d.url, apiKey: f.d.apiKey });
    // 130 events after node.joined: the snapshot's last 100 do not reach it.
    for (let i = 0; i < 65; i++) {
      await api.cordon(f.d.nodeID);
      await api.uncordon(f.d.nodeID);
    }
    start(80, 24, { CUBE_API_KEY: f.d.apiKey, CUBE_API_URL: f.d.url, TERM: 'xterm-256color' }, `${process.execPath} ${BIN} --skin mono`);
    try {
      let s = await until('the node, live', (x) => x.includes('LIVE') && x.includes(f.d.nodeID.slice(0, 6)));
      // The header's totals line keeps the create p99 at 80 columns.
      expect(s.split('\n')[1]).toMatch(/ p99 (\d+ms|\d+\.\d+s|-)$/);
      for (const l of s.split('\n')) expect(l.length).toBeLessThanOrEqual(80);
      // The footprint against the quota, and what the quota is against.
      expect(flat(s)).toMatch(/footprint \S+ of quota \S+ = [\d.]+x (host|declared) \S+, headroom/);

      // The config view: the daemon's --listen over the file's api.listen, and where it came from.
      keys('5');
      const port = new URL(f.d.url).port;
      s = await filter('listen', (x) => new RegExp(`^master\\.api\\.listen +restart +--listen +127\\.0\\.0\\.1:${port}$`, 'm').test(x));
      expect(s).toMatch(/^PATH +APPLIES +FROM +VALUE/m);
      s = await filter('data_dir', (x) => /^cubelet\.data_dir +restart +--data-dir +\//m.test(x));
      expect(flat(s)).toContain(`cubelet.data_dir = ${f.d.dataDir} (from --data-dir)`);

      // The events view: node.joined is older than the snapshot's events until `o` fetches the page before them.
      keys('Escape', '4');
      await filter('joined', (x) => x.includes('no event matches "joined"'));
      keys('o');
      s = await until('the older page', (x) => /older event\(s\) from the daemon history/.test(x) && /node\.joined/.test(x));
      expect(flat(s)).toContain(`node ${f.d.nodeID} registered`);
      keys('q');
      await ended('q');
    } finally {
      kill();
    }
  });
});
