// The launch helper's slim mount namespace (cube-launch serve) is a private copy of the host's
// mounts: it must not keep a filesystem the host unmounted alive. It did until the helper's next
// create, which kept another daemon's loop device attached after that daemon's graceful stop.
import { execa } from 'execa';
import { mkdtemp, readFile, readdir, rmdir } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { SandboxView } from '../../src/api/types.js';
import { call, startDaemon, type TestDaemon } from '../helpers/daemon.js';
import { until } from '../helpers/cluster.js';

let d: TestDaemon;
let dir: string | undefined;
beforeAll(async () => {
  d = await startDaemon();
});
afterAll(async () => {
  if (dir) {
    await execa('umount', [dir], { reject: false });
    await rmdir(dir).catch(() => undefined);
  }
  await d?.stop();
});

/** The pids of the daemon's launch helpers (`cube-launch serve`, children of cubed). */
async function helpers(): Promise<number[]> {
  const out: number[] = [];
  for (const e of await readdir('/proc')) {
    if (!/^\d+$/.test(e)) continue;
    const stat = await readFile(`/proc/${e}/stat`, 'utf8').catch(() => '');
    const cmd = await readFile(`/proc/${e}/cmdline`, 'utf8').catch(() => '');
    const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
    if (ppid === d.pid && cmd.split('\0').includes('serve') && cmd.includes('cube-launch')) out.push(Number(e));
  }
  return out;
}

const sees = async (pid: number, path: string) => (await readFile(`/proc/${pid}/mountinfo`, 'utf8')).split('\n').some((l) => l.split(' ')[4] === path);

describe('the launch helper slim mount namespace', () => {
  it('lets go of a filesystem the host unmounted without waiting for a create', { timeout: 120_000 }, async () => {
    dir = await mkdtemp(join(tmpdir(), 'cube-pin-'));
    await execa('mount', ['-t', 'tmpfs', '-o', 'size=1m', 'cube-pin', dir]);
    // A create makes the helper take the host's mounts in (before it, whatever the refresh timing).
    const c = await call(d, 'POST', '/admin/v1/sandboxes', { templateID: 'base', timeoutSec: 60 });
    expect(c.status).toBe(201);
    const pids = await helpers();
    expect(pids.length).toBeGreaterThan(0);
    await until('the helper has the host mount', async () => ((await Promise.all(pids.map((p) => sees(p, dir!)))).some(Boolean) ? true : undefined), 20_000);

    await execa('umount', [dir]);
    // No create meanwhile: before the fix the copy kept the tmpfs until the next one.
    await until(
      'no helper holds the unmounted filesystem',
      async () => ((await Promise.all(pids.map((p) => sees(p, dir!)))).some(Boolean) ? undefined : true),
      20_000,
    );
    await rmdir(dir);
    dir = undefined;
    expect((await call(d, 'DELETE', `/admin/v1/sandboxes/${(c.json as SandboxView).sandboxID}`)).status).toBe(204);
  });
});
