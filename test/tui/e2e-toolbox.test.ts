// The console as an SRE's toolbox at 80x24 against a real cubed (issue 28): live use per sandbox
// (CPU%, memory, processes, network: read by the node from cgroups on request), sortable; the
// templates, snapshots and API keys views; the console back LIVE after a daemon restart.
// Needs `npm run build`.
import { describe, expect, it } from 'vitest';
import { CubeClient } from '../../src/cli/client.js';
import type { SandboxUsage } from '../../src/api/types.js';
import { fileDaemon } from '../helpers/file-daemon.js';
import { BIN, tmuxConsole } from './tmux.js';

const f = fileDaemon();
const { start, keys, until, filter, ended, kill } = tmuxConsole(`cube-tui-toolbox-${process.pid}`);
const row = (s: string, id: string) => s.split('\n').find((l) => l.startsWith(`${id} `) && /^\S+ {2,}/.test(l)) ?? '';

async function run(api: CubeClient, id: string, command: string): Promise<void> {
  for await (const ev of api.exec(id, { argv: ['sh', '-c', command], timeoutMs: 10_000 })) if (ev.type === 'end') expect(ev.exitCode).toBe(0);
}

describe('cubectl-tui toolbox at 80x24', () => {
  it('shows each sandbox live use, sorts by it, and is LIVE again after a daemon restart', async () => {
    const api = new CubeClient({ baseUrl: f.d.url, apiKey: f.d.apiKey });
    const idle = (await api.createSandbox({ timeoutSec: 600 })).sandboxID;
    const busy = (await api.createSandbox({ timeoutSec: 600 })).sandboxID;
    // A CPU burner left running in the background of one of them.
    await run(api, busy, 'nohup sh -c "while :; do :; done" >/dev/null 2>&1 &');

    // The API: the node's cgroup counters, CPU from two readings.
    await api.usage();
    await new Promise((r) => setTimeout(r, 500));
    const list = await api.usage();
    const u = (id: string) => list.find((x) => x.sandboxID === id) as SandboxUsage;
    expect(u(busy).cpuPercent).toBeGreaterThan(u(idle).cpuPercent ?? 0);
    expect(u(busy).pids).toBeGreaterThanOrEqual(2);
    expect(u(busy).memoryBytes).toBeGreaterThan(0);
    expect(u(busy).memoryLimitBytes).toBe(256 * 2 ** 20);
    expect(u(busy).netRxBytes).toBeGreaterThanOrEqual(0);

    start(80, 24, { CUBE_API_KEY: f.d.apiKey, CUBE_API_URL: f.d.url, TERM: 'xterm-256color' }, `${process.execPath} ${BIN} --skin mono`);
    try {
      keys('2');
      let s = await until(
        'the live use of both',
        (x) => x.includes('LIVE') && /\d+% +\S+Mi\/256Mi +\d+ /.test(row(x, busy)) && /\d+% +\S+Mi\/256Mi/.test(row(x, idle)),
      );
      expect(s.split('\n')[3]).toMatch(/^SANDBOX +NODE +STATE +AGE +CPU% +MEM +PROCS +LEFT/);
      for (const l of s.split('\n')) expect(l.length).toBeLessThanOrEqual(80);
      // Sort by CPU%, busiest first: s to CPU% (SANDBOX TEMPLATE NODE STATE AGE CPU%), S reverses.
      keys('s', 's', 's', 's', 's', 's', 'S');
      s = await until(
        'sorted by CPU% descending',
        (x) => /CPU%v/.test(x) && x.split('\n').findIndex((l) => l.startsWith(`${busy} `)) < x.split('\n').findIndex((l) => l.startsWith(`${idle} `)),
      );
      // The describe pane has the whole use line.
      keys('g', 'Enter');
      s = await until('the use in the describe pane', (x) =>
        /Use: cpu \d+% of 1 vCPU, memory \S+\/256Mi, \d+ processes, disk \S+, network rx \S+ tx \S+/.test(x.replace(/\s+/g, ' ')),
      );
      keys('Escape');

      // Logs that follow: l shows what the processes printed, then what they print next; an
      // escape sequence a process prints is shown escaped, never run by the terminal.
      await run(api, idle, 'echo first-line');
      keys('g');
      await until('idle selected', (x) => x.split('\n').some((l) => l.startsWith(`${idle} `) && l.includes(' running')));
      await filter(idle, (x) => !x.split('\n').some((l) => l.startsWith(`${busy} `)));
      keys('l');
      s = await until('the output so far', (x) => x.includes('[') && / stdout\] first-line/.test(x) && x.includes('following its output'));
      await run(api, idle, 'printf "\\033]0;pwned\\007second-line\\n"');
      // Shown escaped (the command line above it spells \033 itself).
      s = await until('the new line, followed', (x) => x.includes('stdout] \\x1b]0;pwned\\x07second-line'));
      keys('Escape', 'Escape');

      // Templates: which nodes hold them and how many sandboxes use them.
      keys('7');
      s = await until('the templates view', (x) => /^host +\S+ +\S+ +\S+ +1 +2\b/m.test(x) || /^host .* 1 +2 /m.test(x));
      keys('8');
      await until('the snapshots view', (x) => x.includes('no snapshots') || /^SNAPSHOT/m.test(x));
      // API keys: the daemon's admin key with what its two sandboxes hold; never the key itself.
      keys('9');
      s = await until(
        'the keys view',
        (x) => /^KEY +NAME +ROLE +SANDBOXES +VCPUS +MEM +CREATE\/S +CREATED/m.test(x) && /^key-[0-9a-f]{8} +\S+ +admin +2\/\S+ +2\/\S+ +512Mi\/\S+ /m.test(x),
      );
      expect(s).not.toContain(f.d.apiKey);
      expect(s).not.toContain(f.d.apiKey.slice(-12));

      // The daemon restarts: STALE while it is down, then LIVE again on its own within a few
      // seconds of it answering (the watch retries every second; it took 8-12 s before), with
      // the sandboxes it re-adopted in the table.
      keys('2');
      await until('the sandboxes view, filtered to idle', (x) => x.includes(`filter: /${idle}`));
      keys('Escape');
      await until('both sandboxes again', (x) => row(x, busy) !== '' && row(x, idle) !== '');
      await Promise.all([until('STALE while the daemon is down', (x) => x.startsWith('STALE'), 30_000), f.d.restart()]);
      // A bound on the wait, not a timing assert: the 8-12 s of the old backoff fail it.
      s = await until('live again after the restart', (x) => x.startsWith('LIVE') && row(x, busy) !== '' && row(x, idle) !== '', 7_000);
      keys('q');
      await ended('q');
    } finally {
      kill();
    }
  }, 240_000);
});
