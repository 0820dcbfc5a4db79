import { join } from 'node:path';
import { execa } from 'execa';
import { beforeAll, describe, expect, it } from 'vitest';
import type { SandboxHandle } from '../../src/runtime/types.js';
import { run, useRig } from './harness.js';

describe('ns driver exec', () => {
  const rig = useRig('exec');
  let h: SandboxHandle;
  beforeAll(async () => {
    h = await rig().driver.create(rig().spec({ env: { FROM_CREATE: 'c', SHARED: 'create' } }));
  });

  it('passes create-time, per-exec and default variables, also through a login shell', async () => {
    const r = await run(rig(), h, ['bash', '-l', '-c', 'echo "$FROM_CREATE $SHARED $PER_EXEC $HOME $USER $LOGNAME $PATH"'], { env: { SHARED: 'exec', PER_EXEC: 'e' } });
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

  it('refuses to exec into a pid that is not this sandbox init', async () => {
    expect(() => rig().driver.exec({ ...h, initPid: process.pid }, { argv: ['true'] })).toThrow(/not running/);
    const direct = await execa(join(import.meta.dirname, '../../build/cube-launch'), ['exec', '-p', String(process.pid), '--', 'true'], { reject: false });
    expect(direct.exitCode).toBe(125);
    expect(direct.stderr).toMatch(/is not a sandbox init/);
  });
});
