// Issue 29 item 5 through a real cubed: admission counts disk. The node reports its store's size
// and the disk quotas its sandboxes hold; a create whose quota the store cannot take is refused
// (503, 130597) naming the disk_quota rule and its numbers, one that fits is admitted, and a
// disk_gib larger than any node's store (4096 on a 2 GiB store) is a 400 at once. The store image
// is made with single data and metadata (mixed block groups), so a GiB of quota costs a GiB of store.
import { execa } from 'execa';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { join } from 'node:path';
import type { NodeView, SandboxView } from '../../src/api/types.js';
import { call, startDaemon, type TestDaemon } from '../helpers/daemon.js';

let d: TestDaemon;
beforeAll(async () => {
  // A 2 GiB store, sold once (ratio 1): two sandboxes of 1 GiB, the third refused.
  d = await startDaemon({ cubelet: { storage: { image_gib: 2 } }, master: { host: { quota: { disk_oversell_ratio: 1 } } } });
});
afterAll(async () => {
  await d?.stop();
});

const api = (method: string, path: string, body?: unknown) => call(d, method, path, body);
const node = async () => ((await api('GET', '/admin/v1/nodes')).json as NodeView[])[0]!;
const create = (diskGiB: number) => api('POST', '/admin/v1/sandboxes', { templateID: 'base', timeoutSec: 120, diskGiB });

/** Waits until the node's reported disk quota is `gib` (the view is rebuilt from the node's sandboxes). */
async function quotaIs(gib: number): Promise<NodeView> {
  let n = await node();
  for (let i = 0; i < 100 && n.usage.quotaDiskUsedGiB !== gib; i++) {
    await new Promise((r) => setTimeout(r, 100));
    n = await node();
  }
  expect(n.usage.quotaDiskUsedGiB).toBe(gib);
  return n;
}

describe('admission counts disk', () => {
  it('makes the store with data and metadata single, in mixed block groups', async () => {
    const { stdout } = await execa('btrfs', ['filesystem', 'df', join(d.dataDir, 'store')]);
    expect(stdout).toMatch(/^Data\+Metadata, single:/m);
    expect(stdout).not.toMatch(/DUP/);
  });

  it('refuses disk_gib 4096 on a 2 GiB store with 400 naming the sizes', async () => {
    const r = await create(4096);
    expect(r.status).toBe(400);
    expect((r.json as { message: string }).message).toContain(`${d.nodeID}: disk 4096 GiB > sandbox store 2 GiB`);
  });

  it('admits what fits, refuses what the store cannot take with the rule and numbers, admits again once freed', { timeout: 120_000 }, async () => {
    const ids: string[] = [];
    try {
      const n0 = await quotaIs(0);
      expect(n0.usage.store?.sizeBytes).toBe(2 * 1024 ** 3);
      const a = await create(1.5);
      expect(a.status).toBe(201);
      ids.push((a.json as SandboxView).sandboxID);
      const n1 = await quotaIs(1.5);
      expect(n1.density.diskQuotaGiB).toBe(2);
      const { stdout } = await execa('node', ['bin/cubectl', '--api', d.url, 'nodes'], {
        cwd: join(import.meta.dirname, '..', '..'),
        env: { CUBE_API_KEY: d.apiKey },
      });
      expect(stdout).toMatch(/ disk quota /);
      expect(stdout).toMatch(new RegExp(`^${d.nodeID} .* 1\\.5/2Gi `, 'm'));
      expect(n1.rules?.find((v) => v.rule === 'disk_quota')).toEqual({
        rule: 'disk_quota',
        refusal: 'disk quota 1.5+1 > 2 GiB (store 2 GiB x 1 disk oversell)',
      });

      const refused = await create(1);
      expect(refused.status).toBe(503);
      expect(refused.json).toMatchObject({
        code: 130597,
        message: `130597 no node available: ${d.nodeID}: disk quota 1.5+1 > 2 GiB (store 2 GiB x 1 disk oversell)`,
      });

      const small = await create(0.5);
      expect(small.status).toBe(201);
      ids.push((small.json as SandboxView).sandboxID);
      await quotaIs(2);

      expect((await api('DELETE', `/admin/v1/sandboxes/${ids.shift()!}`)).status).toBe(204);
      await quotaIs(0.5);
      const again = await create(1);
      expect(again.status).toBe(201);
      ids.push((again.json as SandboxView).sandboxID);
    } finally {
      for (const id of ids) await api('DELETE', `/admin/v1/sandboxes/${id}`);
    }
  });
});
