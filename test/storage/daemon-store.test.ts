// The sandbox store seen through a real cubed: the node view shows it and puts the watermark on
// it, sandbox listings carry each sandbox's disk use, a full store refuses creates with 503 and
// the reason, --destroy-on-exit removes the mount and the image (stop()'s leak check), and a
// graceful stop with nothing running releases the host's objects but keeps the image.
import { execa } from 'execa';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { join } from 'node:path';
import { readFile, stat, statfs, writeFile } from 'node:fs/promises';
import type { NodeView, SandboxView } from '../../src/api/types.js';
import { adminExec, call, settledKernelObjects, startDaemon, type TestDaemon } from '../helpers/daemon.js';

const MIB = 1024 ** 2;
const GIB = 1024 ** 3;

let d: TestDaemon;
beforeAll(async () => {
  d = await startDaemon({ cubelet: { storage: { image_gib: 1 } } });
});
afterAll(async () => {
  await d?.stop();
});

const api = (method: string, path: string, body?: unknown) => call(d, method, path, body);
const node = async () => ((await api('GET', '/admin/v1/nodes')).json as NodeView[])[0]!;

describe('sandbox store through cubed', () => {
  it('shows the store in the node view and each sandbox disk use in listings', { timeout: 120_000 }, async () => {
    const n = await node();
    expect(n.usage.store).toMatchObject({ kind: 'loop', path: join(d.dataDir, 'store'), sizeBytes: GIB });
    expect(n.usage.diskUsedPercent).toBeGreaterThanOrEqual(n.usage.store!.usedPercent);

    const c = await api('POST', '/admin/v1/sandboxes', { templateID: 'base', timeoutSec: 120, diskGiB: 0.25 });
    expect(c.status).toBe(201);
    const id = (c.json as SandboxView).sandboxID;
    const w = await adminExec(d, id, ['dd', 'if=/dev/zero', 'of=/home/user/blob', 'bs=1M', 'count=20', 'conv=fsync']);
    expect(w.end).toMatchObject({ exitCode: 0 });
    let used: number | undefined;
    for (let i = 0; i < 100 && !(used && used >= 20 * MIB); i++) {
      await new Promise((r) => setTimeout(r, 200));
      used = ((await api('GET', `/admin/v1/sandboxes/${id}`)).json as SandboxView).diskUsedBytes;
    }
    expect(used).toBeGreaterThanOrEqual(20 * MIB);
    expect(used).toBeLessThan(22 * MIB);
    const { stdout } = await execa('node', ['bin/cubectl', '--api', d.url, 'sandbox', 'ls'], {
      cwd: join(import.meta.dirname, '..', '..'),
      env: { CUBE_API_KEY: d.apiKey },
    });
    expect(stdout).toMatch(new RegExp(`${id} .* 2\\dMi/0.25Gi `));
    expect((await api('DELETE', `/admin/v1/sandboxes/${id}`)).status).toBe(204);
  });

  it('refuses a create with 503 and the reason when the store is full, and takes creates again once freed', { timeout: 120_000 }, async () => {
    const store = join(d.dataDir, 'store');
    const fill = join(store, 'fill');
    await execa('sync', ['-f', store]);
    const s = await statfs(store);
    await execa('fallocate', ['-l', `${Math.floor((s.bavail * s.bsize) / MIB) - 100}M`, fill]); // leaves 100 MiB
    try {
      let n = await node();
      for (let i = 0; i < 50 && n.schedulable; i++) {
        await new Promise((r) => setTimeout(r, 200));
        n = await node();
      }
      expect(n).toMatchObject({ schedulable: false, reason: expect.stringMatching(/^disk \d+(\.\d)?% >= 80%$/) });
      const c = await api('POST', '/admin/v1/sandboxes', { templateID: 'base', timeoutSec: 60 });
      expect(c.status).toBe(503);
      expect(c.text).toMatch(/disk/);
    } finally {
      await execa('rm', ['-f', fill]);
      await execa('sync', ['-f', join(d.dataDir, 'store')]); // btrfs frees the space at the commit
    }
    await expect(stat(fill)).rejects.toMatchObject({ code: 'ENOENT' });
    let c = await api('POST', '/admin/v1/sandboxes', { templateID: 'base', timeoutSec: 60 });
    for (let i = 0; i < 50 && c.status === 503; i++) {
      await new Promise((r) => setTimeout(r, 200));
      c = await api('POST', '/admin/v1/sandboxes', { templateID: 'base', timeoutSec: 60 });
    }
    expect(c.status).toBe(201);
    expect((await api('DELETE', `/admin/v1/sandboxes/${(c.json as SandboxView).sandboxID}`)).status).toBe(204);
  });

  it(
    'a graceful stop with no sandbox left releases the mount, loop device, cgroups and pool; the next start mounts the same image',
    { timeout: 120_000 },
    async () => {
      const store = join(d.dataDir, 'store');
      const image = join(d.dataDir, 'store.img');
      const mounted = async () => (await readFile('/proc/self/mounts', 'utf8')).split('\n').some((l) => l.split(' ')[1] === store);
      const loops = async () => (await execa('losetup', ['-j', image])).stdout.trim();
      await writeFile(join(store, 'marker'), 'kept');
      await d.stop({ destroy: false });
      expect(await mounted()).toBe(false);
      expect(await loops()).toBe('');
      expect(await settledKernelObjects(d.tag)).toMatchObject({ cgroups: 0, netns: 0, links: 0, nftTables: 0, processes: 0 });
      expect((await stat(image)).isFile()).toBe(true);
      await d.restart();
      expect(await mounted()).toBe(true);
      expect(await readFile(join(store, 'marker'), 'utf8')).toBe('kept');
      const c = await api('POST', '/admin/v1/sandboxes', { templateID: 'base', timeoutSec: 60 });
      expect(c.status).toBe(201);
      expect((await api('DELETE', `/admin/v1/sandboxes/${(c.json as SandboxView).sandboxID}`)).status).toBe(204);
    },
  );
});
