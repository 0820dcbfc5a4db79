// Commands run by children of the daemon's launch helper (`cube-launch serve`): when cubed is
// killed -9 mid-command, the helper and every command it runs go with it (nothing is left on the
// host), the sandboxes stay, and the restarted daemon runs commands with a new helper.
import { readdirSync, readFileSync } from 'node:fs';
import { Sandbox } from 'e2b';
import { afterAll, describe, expect, it } from 'vitest';
import { startDaemon, type TestDaemon } from '../helpers/daemon.js';

let d: TestDaemon | undefined;
afterAll(async () => {
  await d?.stop();
});

/** Host pids whose command line is exactly `argv`. */
function pidsRunning(argv: string[]): number[] {
  const want = argv.join('\0') + '\0';
  const out: number[] = [];
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      if (readFileSync(`/proc/${name}/cmdline`, 'utf8') === want) out.push(Number(name));
    } catch {
      // gone meanwhile
    }
  }
  return out;
}

/** 0 when the process is gone (helpers of other tests come and go meanwhile). */
const ppidOf = (pid: number): number => {
  try {
    const s = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return Number(s.slice(s.lastIndexOf(')') + 2).split(' ')[1]);
  } catch {
    return 0;
  }
};

async function until(check: () => boolean): Promise<void> {
  while (!check()) await new Promise((r) => setTimeout(r, 50));
}

describe('exec through the launch helper', () => {
  it('leaves no command and no helper behind when cubed is killed -9 mid-command', async () => {
    d = await startDaemon();
    const opts = { apiKey: d.apiKey, apiUrl: d.url, sandboxUrl: d.url };
    const sbx = await Sandbox.create({ ...opts, timeoutMs: 300_000 });
    const fg = sbx.commands.run('sleep 4141', { timeoutMs: 0 }).catch((e: unknown) => e);
    const bg = await sbx.commands.run('sh -c "sleep 4142 & sleep 4143"', { background: true, timeoutMs: 0 });
    await until(
      () => pidsRunning(['sleep', '4141']).length === 1 && pidsRunning(['sleep', '4142']).length === 1 && pidsRunning(['sleep', '4143']).length === 1,
    );
    const helpers = pidsRunning([`${process.cwd()}/build/cube-launch`, 'serve']).filter((p) => ppidOf(p) === d!.pid);
    expect(helpers).toHaveLength(1);

    await d.kill9();
    await until(() => pidsRunning(['sleep', '4141']).length + pidsRunning(['sleep', '4142']).length + pidsRunning(['sleep', '4143']).length === 0);
    await until(() => {
      try {
        process.kill(helpers[0]!, 0);
        return false;
      } catch {
        return true;
      }
    });
    await fg;
    void bg;

    await d.restart();
    const again = await Sandbox.connect(sbx.sandboxId, opts);
    expect((await again.commands.run('echo "after $((40 + 2))"')).stdout).toBe('after 42\n');
  });
});
