// The launch helper's store requests run on a thread of `cube-launch serve`, not in a forked
// child each (native/launch/serve.c): a failing request must answer its error and leave the
// helper serving, and no request may leave an fd open in it (a child's exit used to close them).
import { mkdir, readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { LaunchHelper, nativeBinary } from '../../src/runtime/ns/helper.js';
import { useLoopStore } from '../helpers/loop-store.js';

/** The pid of the newest `cube-launch serve` this test process started. */
async function servePid(): Promise<number> {
  const mine: number[] = [];
  for (const e of await readdir('/proc')) {
    if (!/^\d+$/.test(e)) continue;
    const status = await readFile(`/proc/${e}/status`, 'utf8').catch(() => '');
    const cmd = await readFile(`/proc/${e}/cmdline`, 'utf8').catch(() => '');
    if (/^PPid:\s+(\d+)$/m.exec(status)?.[1] === String(process.pid) && cmd.endsWith('serve\0')) mine.push(Number(e));
  }
  expect(mine.length).toBeGreaterThan(0);
  return Math.max(...mine);
}

const fds = async (pid: number) => (await readdir(`/proc/${pid}/fd`)).length;

describe('store requests on the helper thread', () => {
  const loop = useLoopStore('store-thread');
  let root = '';
  const helper = new LaunchHelper(nativeBinary('cube-launch'));
  beforeAll(async () => {
    root = join(loop().dataDir, 'store', 'thread-test');
    await mkdir(root);
  });

  it('answers each failure with its code and message, and goes on serving', async () => {
    expect(await helper.store(['delete', join(root, 'never-made')])).toMatchObject({ exitCode: 0 });
    expect(await helper.store(['delete', root])).toMatchObject({ exitCode: 3, stderr: expect.stringContaining('is not a subvolume') });
    expect(await helper.store(['subvol', '/nonexistent-cube-dir/x', '0'])).toMatchObject({
      exitCode: 125,
      stderr: expect.stringMatching(/open the parent of \/nonexistent-cube-dir\/x: No such file or directory/),
    });
    expect(await helper.store(['snapshot', join(root, 'no-source'), join(root, 'copy'), '0'])).toMatchObject({
      exitCode: 125,
      stderr: expect.stringContaining('open '),
    });
    expect(await helper.store(['limit', root, '1000'])).toMatchObject({ exitCode: 3 });
    expect(await helper.store(['bogus'])).toMatchObject({ exitCode: 2, stderr: expect.stringContaining('bad store request bogus') });
    expect(await helper.store(['ids', root, join(root, 'never-made')])).toMatchObject({ exitCode: 0, stdout: '0\n0\n' });
  });

  it('makes and deletes subvolumes concurrently with other jobs, leaving no fd behind', async () => {
    // One round first: the thread's lazily opened streams and the helper's own fds are in place.
    expect(await helper.store(['subvol', join(root, 'warm'), '0'])).toMatchObject({ exitCode: 0 });
    expect(await helper.store(['delete', join(root, 'warm')])).toMatchObject({ exitCode: 0 });
    const pid = await servePid();
    const before = await fds(pid);
    // A slow job in flight meanwhile: store answers do not wait for it.
    const slow = helper.run(['sleep', '1']);
    const names = Array.from({ length: 40 }, (_, i) => join(root, `sb-${i}`));
    const made = await Promise.all(names.map((n, i) => helper.store(['subvol', n, String((i + 1) * 1024 * 1024)])));
    for (const r of made) expect(r).toMatchObject({ exitCode: 0, stdout: expect.stringMatching(/^\d+\n$/) });
    expect(new Set(made.map((r) => r.stdout)).size).toBe(names.length);
    const again = await helper.store(['subvol', names[0]!, '0']);
    expect(again).toMatchObject({ exitCode: 125, stderr: expect.stringContaining('File exists') });
    const gone = await Promise.all(names.map((n) => helper.store(['delete', n])));
    for (const r of gone) expect(r).toMatchObject({ exitCode: 0 });
    expect((await helper.store(['ids', ...names])).stdout).toBe('0\n'.repeat(names.length));
    expect(await slow).toMatchObject({ exitCode: 0 });
    expect(await servePid()).toBe(pid);
    expect(await fds(pid)).toBe(before);
  });
});
