// The console as an SRE uses it in an incident, in tmux at 80x24 against a real cubed
// (issue 16): the node row says what the scheduler's filters say (a create refused on host
// CPU shows `no: cpu util ...`, never `yes`); keys that arrive in one read all count; the
// drain dialog says sandboxes are not migrated and evicts after a deadline; `:q!` quits;
// CUBE_API_URL with a dead replica first still connects. Needs `npm run build`.
import { spawn, type ChildProcess } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CubeClient, CubeClientError } from '../../src/cli/client.js';
import { FILTER_NAMES } from '../../src/config/schema.js';
import { startDaemon, type TestDaemon } from '../helpers/daemon.js';
import { BIN, tmuxConsole } from './tmux.js';

const { start, keys, until, ended, kill } = tmuxConsole(`cube-tui-incident-${process.pid}`);

/** The table row of the node (its id is cut at 80 columns; the detail line under the table starts with it too). */
const nodeRow = (s: string) => s.split('\n').find((l) => l.startsWith(d.nodeID.slice(0, 6)) && / (HEALTHY|UNHEALTHY|LOST|DRAINING) /.test(l)) ?? '';
/** The screen's lines joined: the detail lines wrap at 80. */
const flat = (s: string) =>
  s
    .split('\n')
    .map((l) => l.trimEnd())
    .join(' ');

/** The cpu filter's words with a 0.01% cap: host or sandbox use over it, or a quota of (almost) nothing. */
const CPU_REFUSAL = /(cpu util \d+(\.\d)?% >= 0%|sandbox cpu use \d+(\.\d)?% >= 0%|cpu quota [\d.]+\+1 > [\d.]+)/;

let d: TestDaemon;
let api: CubeClient;
// The test daemon runs without the cpu filter (parallel tests keep 2 cores busy); this test
// turns it on with a cap any host use is over, and keeps the host busy so that is certain.
let burner: ChildProcess | undefined;

beforeAll(async () => {
  d = await startDaemon();
  api = new CubeClient({ baseUrl: d.url, apiKey: d.apiKey });
});
afterAll(async () => {
  burner?.kill('SIGKILL');
  await d?.stop();
});

describe('cubectl-tui at 80x24 in an incident', () => {
  it('shows the scheduler verdict, handles keys of one read in order, drains with eviction, quits with :q!', async () => {
    // A dead replica first: the console starts on the one that answers.
    start(80, 24, { CUBE_API_KEY: d.apiKey, CUBE_API_URL: `http://127.0.0.1:9,${d.url}`, TERM: 'xterm-256color' }, `${process.execPath} ${BIN} --skin mono`);
    try {
      let s = await until('the node, live', (x) => x.includes('LIVE') && x.includes(d.nodeID));
      expect(s.split('\n')[0]).toContain(d.url);
      expect(nodeRow(s)).toMatch(/HEALTHY +yes /);
      expect(s).toContain('(1 schedulable)');
      const header = s.split('\n').find((l) => l.startsWith('NODE '))!;
      expect(header.trimEnd()).toMatch(/ CPU +MEMAV +DENSITY +HEAD +DISK\/MARK +POOL$/);
      for (const l of s.split('\n')) expect(l.length).toBeLessThanOrEqual(80);

      // Host CPU over the cpu filter's cap: every create is refused, and the screen says so with the same words.
      burner = spawn(process.execPath, ['-e', 'for(;;){}'], { stdio: 'ignore' });
      expect((await api.setConfig('scheduler.node_max_cpu_util', 0.01)).ok).toBe(true);
      expect((await api.setConfig('scheduler.filter.enable_filters', [...FILTER_NAMES])).ok).toBe(true);
      s = await until('the cpu refusal on the row', (x) => /HEALTHY +no: cp/.test(nodeRow(x)) && x.includes('(0 schedulable)'));
      expect(flat(s)).toMatch(
        new RegExp(
          `${d.nodeID} NOT schedulable \\(cpu\\): ${CPU_REFUSAL.source} \\| footprint [^|]+, all paused \\d+ at r [\\d.]+ \\| host cpu \\d+%, MemAvailable`,
        ),
      );
      const refused = await api.createSandbox({ timeoutSec: 60 }).then(
        () => null,
        (e: unknown) => e,
      );
      expect(refused).toBeInstanceOf(CubeClientError);
      // 130597 while the load refuses it; with a cap this low the quota admits no sandbox at all, a 400 naming it.
      expect([130597, 130400]).toContain((refused as CubeClientError).code);
      expect((refused as CubeClientError).message).toMatch(/cpu quota|cpu util|sandbox cpu use/);
      // Enter describes the node: every rule of the scheduler with its verdict (scrolled to them).
      keys('Enter');
      await until('the node description', (x) => x.includes(`Node ${d.nodeID}`) && /j\/k scroll/.test(x));
      keys('G');
      s = await until('the rules', (x) => new RegExp(`REFUSE cpu: ${CPU_REFUSAL.source}`).test(x) && x.includes('pass mem'));
      for (const l of s.split('\n')) expect(l.length).toBeLessThanOrEqual(80);
      keys('Escape');
      await until('the nodes table again', (x) => /^NODE +STATE/m.test(x));
      // Triage names it with the fix; the selected finding is whole under the table.
      keys('6');
      s = await until('the triage finding', (x) => /^(BAD|WARN) +\S+ +CPU starvation/m.test(x));
      expect(flat(s)).toMatch(/CPU starvation: .*node_max_cpu_util 0%.*\. FIX: find what burns/);
      keys('1');
      expect(
        (
          await api.setConfig(
            'scheduler.filter.enable_filters',
            FILTER_NAMES.filter((f) => f !== 'cpu'),
          )
        ).ok,
      ).toBe(true);
      expect((await api.setConfig('scheduler.node_max_cpu_util', 80)).ok).toBe(true);
      burner.kill('SIGKILL');
      s = await until('schedulable again', (x) => /HEALTHY +yes /.test(nodeRow(x)) && x.includes('(1 schedulable)'));

      // Four sandboxes; `jjj` sent in one write moves three rows (the detail line names the selected one).
      const ids: string[] = [];
      for (let i = 0; i < 4; i++) ids.push((await api.createSandbox({ timeoutSec: 300 })).sandboxID);
      ids.sort();
      keys('2');
      await until('the sandboxes', (x) => ids.every((id) => x.includes(id)));
      keys('-l', 'jjj');
      s = await until('the fourth sandbox selected', (x) => flat(x).includes(`${ids[3]} running |`));

      // ctrl-u, a value and Enter at once: the new value is applied and the outcome line says so.
      keys('1');
      keys('r');
      await until('the ratio prompt', (x) => x.includes('paused_resource_release_ratio (now 0)'));
      keys('-H', '15', '30', '2e', '35', '0d');
      s = await until('the applied ratio', (x) => x.includes('release ratio 0.5 applied'));
      expect((await api.config()).master).toMatchObject({ host: { quota: { paused_resource_release_ratio: 0.5 } } });

      // Drain: the dialog says what happens; `e` evicts after a deadline (0 s here).
      keys('d');
      s = await until('the drain dialog', (x) => x.includes(`Drain node ${d.nodeID}?`));
      // The count is the node's as the dialog opens (a sandbox of the burst may still be ending).
      expect(flat(s)).toMatch(/Its \d+ sandbox\(es\) are NOT migrated/);
      expect(s).toContain('e: evict after a deadline');
      keys('e');
      await until('the deadline prompt', (x) => x.includes('> 300_'));
      keys('C-u', '0', 'Enter');
      // The outcome wraps at 80 columns instead of losing its end.
      await until('the drain outcome', (x) => flat(x).includes(`${d.nodeID} draining: 4 sandbox(es) destroyed in 0s unless they end first`));
      s = await until('the node draining and empty', (x) => /DRAINING +no: dr/.test(nodeRow(x)) && / 0 \/ \d+ /.test(nodeRow(x)), 30_000);
      expect(await api.sandboxes()).toEqual([]);

      keys(':', 'q', '!', 'Enter');
      await ended(':q!');
    } finally {
      burner?.kill('SIGKILL');
      kill();
    }
  });
});
