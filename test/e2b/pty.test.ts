// Terminals through the real `e2b` SDK (sandbox.pty.*) and the real `@e2b/cli` (`e2b sandbox
// connect`): the pty lives inside the sandbox, its output comes back as envd `data.pty` events,
// input and resizes go to it.
import { join } from 'node:path';
import { Sandbox } from 'e2b';
import { execa } from 'execa';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startDaemon, type TestDaemon } from '../helpers/daemon.js';

let d: TestDaemon;
let sbx: Sandbox;

beforeAll(async () => {
  d = await startDaemon();
  sbx = await Sandbox.create({ apiKey: d.apiKey, apiUrl: d.url, sandboxUrl: d.url });
});

afterAll(async () => {
  try {
    await sbx?.kill().catch(() => false);
  } finally {
    await d?.stop();
  }
});

/** Collects a terminal's output; `until` waits for a pattern to show up in it. */
function screen() {
  const dec = new TextDecoder();
  let text = '';
  const waiters: (() => void)[] = [];
  return {
    onData: (b: Uint8Array) => {
      text += dec.decode(b, { stream: true });
      for (const w of waiters.splice(0)) w();
    },
    get text() {
      return text;
    },
    async until(re: RegExp): Promise<RegExpExecArray> {
      for (;;) {
        const m = re.exec(text);
        if (m) return m;
        await new Promise<void>((r) => waiters.push(r));
      }
    },
  };
}

describe('e2b SDK pty', () => {
  it('creates a terminal, echoes input, reports and changes its size, and kills it', async () => {
    const s = screen();
    const term = await sbx.pty.create({ cols: 90, rows: 25, onData: s.onData, timeoutMs: 0 });
    expect(term.pid).toBeGreaterThan(0);
    await sbx.pty.sendInput(term.pid, new TextEncoder().encode('echo hi\n'));
    await s.until(/[\r\n]hi\r\n/); // after the echoed input line (and bash's bracketed-paste switch)
    await sbx.pty.sendInput(term.pid, new TextEncoder().encode('echo "size $(stty size) $TERM $(whoami) $(tty)"\n'));
    expect((await s.until(/size (\d+ \d+) (\S+) (\S+) (\/dev\/pts\/\d+)/)).slice(1, 4)).toEqual(['25 90', 'xterm-256color', 'user']);
    await sbx.pty.resize(term.pid, { cols: 120, rows: 40 });
    await sbx.pty.sendInput(term.pid, new TextEncoder().encode('echo "now $(stty size)"\n'));
    await s.until(/now 40 120/);

    const listed = await sbx.commands.list();
    expect(listed.map((p) => p.pid)).toContain(term.pid);
    expect(await sbx.pty.kill(term.pid)).toBe(true);
    const end = await term.wait().catch((e: { exitCode?: number }) => e);
    expect(end.exitCode).toBe(-1);
    expect(await sbx.pty.kill(term.pid)).toBe(false);
  });

  it('reconnects to a running terminal, and ends when the shell exits', async () => {
    const first = screen();
    const term = await sbx.pty.create({ cols: 80, rows: 24, onData: first.onData, timeoutMs: 0, user: 'root' });
    await term.disconnect();
    const again = screen();
    const back = await sbx.pty.connect(term.pid, { onData: again.onData, timeoutMs: 0 });
    await sbx.pty.sendInput(term.pid, new TextEncoder().encode('echo "back $(whoami)"; exit 4\n'));
    await again.until(/back root/);
    const end = await back.wait().catch((e: { exitCode?: number }) => e);
    expect(end.exitCode).toBe(4);
  });

  it('refuses a resize of a process without a terminal and a pty too large; size 0 is a console 80x24', async () => {
    const plain = await sbx.commands.run('sleep 30', { background: true, timeoutMs: 0 });
    await expect(sbx.pty.resize(plain.pid, { cols: 80, rows: 24 })).rejects.toThrow(/no terminal/);
    await plain.kill();
    await expect(sbx.pty.create({ cols: 70_000, rows: 24, onData: () => {} })).rejects.toThrow(/cols and rows/);
    const s = screen();
    const term = await sbx.pty.create({ cols: 0, rows: 0, onData: s.onData, timeoutMs: 0 });
    await sbx.pty.sendInput(term.pid, new TextEncoder().encode('echo "zero $(stty size)"; exit\n'));
    await s.until(/zero 24 80/);
    await term.wait();
  });

  it("serves the CLI's `e2b sandbox connect` on a real terminal (under script)", async () => {
    const cli = join(import.meta.dirname, '../../node_modules/@e2b/cli/dist/index.js');
    const p = execa('script', ['-qfec', `stty cols 100 rows 30; ${process.execPath} ${cli} sandbox connect ${sbx.sandboxId}`, '/dev/null'], {
      env: { E2B_API_KEY: d.apiKey, E2B_API_URL: d.url, E2B_SANDBOX_URL: d.url },
      reject: false,
    });
    const s = screen();
    p.stdout!.on('data', s.onData);
    await s.until(/Terminal connecting to sandbox[^]*\$ $/);
    p.stdin!.write('echo "hi $((6*7)) $(stty size) $(whoami)"\r');
    await s.until(/hi 42 30 100 user/);
    p.stdin!.write('exit\r');
    const r = await p;
    expect(r.exitCode).toBe(0);
    expect(s.text).toMatch(/Closing terminal connection/);
  });
});
