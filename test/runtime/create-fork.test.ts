// A create forks the sandbox's init straight from `cube-launch serve` (native/launch/create.c):
// serve enters a new pid namespace for that one fork and steps back into its own, follows the
// init's report from its loop (the id maps, then "ok" or a failure's message) and reaps the init
// once it dies. Nothing of one create may reach the next: not the pid namespace, not an fd.
import { readdir, readFile, readlink } from 'node:fs/promises';
import { describe, expect, it } from 'vitest';
import { CubeError } from '../../src/errors.js';
import { sharedHelper } from '../../src/runtime/ns/helper.js';
import type { SandboxHandle } from '../../src/runtime/types.js';
import { run, useRig } from './harness.js';

const status = async (pid: number) => readFile(`/proc/${pid}/status`, 'utf8').catch(() => '');
const field = (s: string, name: string) => new RegExp(`^${name}:\\s+(\\S+)`, 'm').exec(s)?.[1];

/** The one `cube-launch serve` child of this process: the shared helper the rig's driver uses. */
async function theServe(): Promise<number> {
  const out: number[] = [];
  for (const e of await readdir('/proc')) {
    if (!/^\d+$/.test(e)) continue;
    const cmd = await readFile(`/proc/${e}/cmdline`, 'utf8').catch(() => '');
    if (cmd.endsWith('serve\0') && field(await status(Number(e)), 'PPid') === String(process.pid)) out.push(Number(e));
  }
  expect(out).toHaveLength(1);
  return out[0]!;
}

/** Children of `parent` in state Z (exited, not reaped). */
async function zombiesOf(parent: number): Promise<number[]> {
  const out: number[] = [];
  for (const e of await readdir('/proc')) {
    if (!/^\d+$/.test(e)) continue;
    const s = await status(Number(e));
    if (field(s, 'PPid') === String(parent) && field(s, 'State') === 'Z') out.push(Number(e));
  }
  return out;
}

async function until(check: () => Promise<boolean>, what: string): Promise<void> {
  for (let i = 0; i < 100; i++) {
    if (await check()) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`still not: ${what}`);
}

describe('the sandbox init, forked by the launch helper', () => {
  const rig = useRig('create-fork', { allowNetRaw: true });

  it('makes 24 inits at once, own ids and host ids mixed: each a child of the helper and pid 1 of its own namespace, the helper back in its own', async () => {
    const warm = await rig().driver.create(rig().spec());
    const serve = await theServe();
    await rig().driver.destroy(warm.sandboxID);
    const fds = (await readdir(`/proc/${serve}/fd`)).length;
    const ownPidns = await readlink(`/proc/${serve}/ns/pid`);

    const hostIds = (i: number) => i % 3 === 0;
    const hs: SandboxHandle[] = await Promise.all(Array.from({ length: 24 }, (_, i) => rig().driver.create(rig().spec(hostIds(i) ? { netRaw: true } : {}))));
    expect(await readlink(`/proc/${serve}/ns/pid_for_children`)).toBe(ownPidns);
    const namespaces = new Set<string>();
    for (const [i, h] of hs.entries()) {
      expect(field(await status(h.initPid), 'PPid')).toBe(String(serve));
      namespaces.add(await readlink(`/proc/${h.initPid}/ns/pid`));
      const r = await run(rig(), h, ['sh', '-c', 'echo $$; cat /proc/self/uid_map']);
      expect(r.exitCode).toBe(0);
      const [, map] = r.stdout.split('\n', 2);
      if (hostIds(i)) expect(map).toMatch(/^\s*0\s+0\s+4294967295$/);
      else expect(map).toMatch(/^\s*0\s+\d{7,}\s+65536$/);
    }
    expect(namespaces.size).toBe(hs.length);
    expect(namespaces.has(ownPidns)).toBe(false);
    // A command the same helper runs on the host afterwards is in the helper's pid namespace, not a sandbox's.
    const host = await sharedHelper().run(['readlink', '/proc/self/ns/pid']);
    expect(host.stdout.trim()).toBe(await readlink('/proc/self/ns/pid'));

    await Promise.all(hs.map((h) => rig().driver.destroy(h.sandboxID)));
    await until(async () => (await zombiesOf(serve)).length === 0, 'every init reaped by the helper');
    expect(await readlink(`/proc/${serve}/ns/pid_for_children`)).toBe(ownPidns);
    expect((await readdir(`/proc/${serve}/fd`)).length).toBe(fds);
  });

  it('answers an init that fails with its message, leaves nothing of it, and goes on', async () => {
    const serve = await theServe();
    const fds = (await readdir(`/proc/${serve}/fd`)).length;
    for (const netRaw of [false, true]) {
      const err = await rig()
        .driver.create(rig().spec({ netnsPath: '/run/netns/cube-create-fork-none', netRaw }))
        .catch((e: unknown) => e);
      expect(err).toBeInstanceOf(CubeError);
      expect(err).toMatchObject({
        kind: 'CREATE_FAILED',
        message: expect.stringMatching(/sandbox init failed: open \/run\/netns\/cube-create-fork-none: No such file or directory/),
      });
    }
    await until(async () => (await zombiesOf(serve)).length === 0, 'the failed inits reaped');
    expect((await readdir(`/proc/${serve}/fd`)).length).toBe(fds);
    const h = await rig().driver.create(rig().spec());
    expect((await run(rig(), h, ['echo', 'ok'])).stdout).toBe('ok\n');
    await rig().driver.destroy(h.sandboxID);
  });

  it('refuses a malformed request with exit 2 and the reason', async () => {
    const helper = sharedHelper();
    expect(await helper.create(['-z'])).toMatchObject({ exitCode: 2, stderr: expect.stringContaining('unknown option or missing value: -z') });
    expect(await helper.create(['-i', 'x'])).toMatchObject({ exitCode: 2, stderr: expect.stringContaining('create needs -i -l -u -w -m') });
    expect(await helper.create(['-i', 'x', '-l', '/', '-u', '/a/u', '-w', '/a/w', '-m', '/a', '-I', '-5'])).toMatchObject({ exitCode: 2 });
  });
});
