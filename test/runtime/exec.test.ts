import { join } from 'node:path';
import { execa } from 'execa';
import { beforeAll, describe, expect, it } from 'vitest';
import { OUTPUT_WINDOW } from '../../src/runtime/ns/helper.js';
import type { SandboxHandle } from '../../src/runtime/types.js';
import { run, useRig } from './harness.js';

describe('ns driver exec', () => {
  const rig = useRig('exec');
  let h: SandboxHandle;
  beforeAll(async () => {
    h = await rig().driver.create(rig().spec({ env: { FROM_CREATE: 'c', SHARED: 'create' } }));
  });

  it('passes create-time, per-exec and default variables, also through a login shell', async () => {
    const r = await run(rig(), h, ['bash', '-l', '-c', 'echo "$FROM_CREATE $SHARED $PER_EXEC $HOME $USER $LOGNAME $PATH"'], {
      env: { SHARED: 'exec', PER_EXEC: 'e' },
    });
    expect(r.stdout).toBe('c exec e /home/user user user /usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n');
    const custom = await run(rig(), h, ['bash', '-l', '-c', 'echo $PATH'], { env: { PATH: '/opt/x:/usr/bin:/bin' } });
    expect(custom.stdout).toBe('/opt/x:/usr/bin:/bin\n');
  });

  it('runs as user (default) or root, in the home directory unless told otherwise', async () => {
    expect((await run(rig(), h, ['sh', '-c', 'id -u; pwd; cat /proc/self/status | grep NoNewPrivs'])).stdout).toBe('1000\n/home/user\nNoNewPrivs:\t1\n');
    expect((await run(rig(), h, ['sh', '-c', 'id -u; pwd; echo $HOME'], { user: 'root' })).stdout).toBe('0\n/root\n/root\n');
    expect((await run(rig(), h, ['pwd'], { cwd: '/tmp' })).stdout).toBe('/tmp\n');
    const bad = await run(rig(), h, ['pwd'], { cwd: '/nonexistent' });
    expect(bad.exitCode).toBe(125);
    expect(bad.stderr).toMatch(/chdir \/nonexistent/);
    expect(() => rig().driver.exec(h, { argv: ['true'], user: 'admin' })).toThrow(/unknown user/);
    expect(() => rig().driver.exec(h, { argv: [] })).toThrow(/non-empty argv/);
    expect(() => rig().driver.exec(h, { argv: ['true'], env: { 'A=B': 'x' } })).toThrow(/invalid environment variable/);
  });

  it('reports exit codes, signals and missing commands', async () => {
    expect((await run(rig(), h, ['sh', '-c', 'exit 3'])).exitCode).toBe(3);
    expect(await run(rig(), h, ['sh', '-c', 'kill -TERM $$'])).toMatchObject({ exitCode: 143, signal: 'SIGTERM', timedOut: false });
    const missing = await run(rig(), h, ['no-such-command']);
    expect(missing.exitCode).toBe(127);
    expect(missing.stderr).toMatch(/no-such-command/);
  });

  it('feeds stdin and streams stdout and stderr separately', async () => {
    const r = await run(rig(), h, ['sh', '-c', 'tr a-z A-Z; echo err >&2'], { input: 'hello\n' });
    expect(r.stdout).toBe('HELLO\n');
    expect(r.stderr).toBe('err\n');
  });

  it('kills the whole process group on timeout and on kill()', async () => {
    const r = await run(rig(), h, ['sh', '-c', 'sleep 30 & sleep 30; echo never'], { timeoutMs: 200 });
    expect(r).toMatchObject({ timedOut: true, signal: 'SIGKILL', exitCode: 137 });
    const p = rig().driver.exec(h, { argv: ['sleep', '30'] });
    setTimeout(() => p.kill(), 100);
    expect(await p.exited).toMatchObject({ timedOut: false, signal: 'SIGKILL' });
    const left = await run(rig(), h, ['sh', '-c', 'ps -eo comm --no-headers | grep -c sleep || true']);
    expect(left.stdout.trim()).toBe('0');
  });

  it('runs 20 commands at once through the helper, each with its own output, stdin and exit code', async () => {
    const rs = await Promise.all(
      Array.from({ length: 20 }, (_, i) => run(rig(), h, ['sh', '-c', `read x; echo "$x-${i}"; echo e${i} >&2; exit ${i % 4}`], { input: `in${i}\n` })),
    );
    rs.forEach((r, i) => expect(r).toMatchObject({ stdout: `in${i}-${i}\n`, stderr: `e${i}\n`, exitCode: i % 4 }));
  });

  it('streams output while the command runs and answers input as it comes', async () => {
    const p = rig().driver.exec(h, { argv: ['sh', '-c', 'echo ready; while read l; do echo "got $l"; done'], stdin: true });
    const lines: string[] = [];
    let buf = '';
    const next = () =>
      new Promise<string>((resolve) => {
        const take = () => {
          const i = buf.indexOf('\n');
          if (i < 0) return p.stdout.once('data', (b: Buffer) => ((buf += b.toString()), take()));
          const line = buf.slice(0, i);
          buf = buf.slice(i + 1);
          resolve(line);
        };
        take();
      });
    lines.push(await next());
    p.stdin!.write('one\n');
    lines.push(await next());
    p.stdin!.write('two\n');
    lines.push(await next());
    p.stdin!.end();
    expect(await p.exited).toMatchObject({ exitCode: 0 });
    expect(lines).toEqual(['ready', 'got one', 'got two']);
  });

  it('holds a paused stream at the helper (its credit window), every other command going on, and loses none of it', async () => {
    const p = rig().driver.exec(h, { argv: ['sh', '-c', 'head -c 3000000 /dev/zero; echo done >&2'] });
    let got = 0;
    let err = '';
    p.stdout.on('data', (b: Buffer) => (got += b.length));
    p.stderr.on('data', (b: Buffer) => (err += b.toString()));
    p.stdout.pause();
    while (p.stdout.readableLength < OUTPUT_WINDOW) await new Promise((r) => setTimeout(r, 20));
    // The helper's one pipe carries this command too: it is not stalled by the paused stream.
    const other = await run(rig(), h, ['seq', '100000']);
    expect([other.stdout.length, other.exitCode]).toEqual([588_895, 0]);
    await new Promise((r) => setTimeout(r, 300));
    expect([got, p.stdout.readableLength]).toEqual([0, OUTPUT_WINDOW]); // no more came than the window
    p.stdout.resume();
    expect(await p.exited).toMatchObject({ exitCode: 0 });
    expect([got, err]).toEqual([3_000_000, 'done\n']);
  });

  it('gives a pty command a terminal of the sandbox: session leader, sized, resizable, TERM set', async () => {
    const p = rig().driver.exec(h, { argv: ['bash', '--norc', '--noprofile', '-i'], pty: { cols: 100, rows: 30 } });
    let out = '';
    p.stdout.on('data', (b: Buffer) => (out += b.toString()));
    const until = async (re: RegExp) => {
      while (!re.test(out)) await new Promise((r) => p.stdout.once('data', r));
    };
    p.stdin!.write('echo "size $(stty size) term $TERM lang $LANG tty $(tty) sid $(ps -o sid= $$) pid $$"\n');
    await until(/size \d+ \d+ term \S+ lang \S+ tty \S+ sid +\d+ pid \d+/);
    const m = /size (\d+) (\d+) term (\S+) lang (\S+) tty (\S+) sid +(\d+) pid (\d+)/.exec(out)!;
    expect(m.slice(1, 6)).toEqual(['30', '100', 'xterm-256color', 'C.UTF-8', m[5]]);
    expect(m[5]).toMatch(/^\/dev\/pts\/\d+$/);
    expect(m[6]).toBe(m[7]); // the shell leads its session
    p.resize!(132, 43);
    p.stdin!.write('echo "now $(stty size)"\n');
    await until(/now 43 132/);
    p.stdin!.write('exit 7\n');
    expect(await p.exited).toMatchObject({ exitCode: 7 });
    expect(() => rig().driver.exec(h, { argv: ['true'], pty: { cols: 0, rows: 24 } })).toThrow(/pty size/);
  });

  it('kills a pty session: the shell, and its foreground job through the hangup', async () => {
    const p = rig().driver.exec(h, { argv: ['bash', '--norc', '-i'], pty: { cols: 80, rows: 24 } });
    p.stdin!.write('sleep 3132\n');
    const listing = async () => (await run(rig(), h, ['sh', '-c', 'ps -eo args --no-headers | grep -c "^sleep 3132" || true'])).stdout.trim();
    while ((await listing()) !== '1') await new Promise((r) => setTimeout(r, 50));
    p.kill();
    expect(await p.exited).toMatchObject({ signal: 'SIGKILL' });
    expect(await listing()).toBe('0');
  });

  it('refuses to exec into a pid that is not this sandbox init', async () => {
    expect(() => rig().driver.exec({ ...h, initPid: process.pid }, { argv: ['true'] })).toThrow(/not running/);
    const direct = await execa(join(import.meta.dirname, '../../build/cube-launch'), ['exec', '-p', String(process.pid), '--', 'true'], { reject: false });
    expect(direct.exitCode).toBe(125);
    expect(direct.stderr).toMatch(/is not a sandbox init/);
  });
});
