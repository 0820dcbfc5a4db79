// 100 sandboxes created and destroyed concurrently through a real cubed: every create
// succeeds, and afterwards nothing of the node is left but its warm pool.
import { execa } from 'execa';
import { afterAll, beforeAll, expect, it } from 'vitest';
import type { NodeView, SandboxView } from '../../src/api/types.js';
import { countKernelObjects } from '../helpers/kernel.js';
import { call, startDaemon, type TestDaemon } from '../helpers/daemon.js';

let d: TestDaemon;
beforeAll(async () => {
  d = await startDaemon({ master: { sandbox: { default_spec: { cpus: 0.5, memory_mib: 64 } } } });
});
afterAll(async () => {
  await d?.stop();
});

const api = (method: string, path: string, body?: unknown) => call(d, method, path, body);

it('creates and destroys 100 sandboxes concurrently with zero leaked kernel objects', async () => {
  const before = await countKernelObjects(d.tag);
  const creates = await Promise.all(Array.from({ length: 100 }, () => api('POST', '/admin/v1/sandboxes', {})));
  const failed = creates.filter((c) => c.status !== 201);
  const ids = creates.filter((c) => c.status === 201).map((c) => (c.json as SandboxView).sandboxID);
  try {
    expect(failed.map((f) => f.json)).toEqual([]);
    expect(new Set(ids).size).toBe(100);
    const during = await countKernelObjects(d.tag);
    expect(during.processes).toBe(100);
    const node = (await api('GET', '/admin/v1/nodes')).json[0] as NodeView;
    expect(node.sandboxes.running).toBe(100);
  } finally {
    const destroys = await Promise.all(ids.map((id) => api('DELETE', `/admin/v1/sandboxes/${id}`)));
    expect(destroys.filter((r) => r.status !== 204).map((r) => r.json)).toEqual([]);
  }
  expect((await api('GET', '/admin/v1/sandboxes')).json).toEqual([]);
  let after = await countKernelObjects(d.tag);
  // Killed inits are zombies until the host's pid 1 reaps them (see settledKernelObjects).
  for (let i = 0; i < 50 && after.processes > 0; i++) {
    await new Promise((r) => setTimeout(r, 200));
    after = await countKernelObjects(d.tag);
  }
  // The pool refills to tap_init_num (and trims what a burst left above it, in the background);
  // the slots' netns and host veths are the only objects left once it has settled.
  let node = (await api('GET', '/admin/v1/nodes')).json[0] as NodeView;
  for (let i = 0; i < 100 && after.netns !== node.pool.total; i++) {
    await new Promise((r) => setTimeout(r, 200));
    after = await countKernelObjects(d.tag);
    node = (await api('GET', '/admin/v1/nodes')).json[0] as NodeView;
  }
  expect(after.processes).toBe(0);
  expect(after.mounts).toBe(before.mounts);
  // Only the node's parent cgroups (cube-<tag>, made at the first create) may remain: no sandbox below them.
  const perSandbox = await execa('find', ['/sys/fs/cgroup', '-maxdepth', '8', '-type', 'd', '-path', `*/cube-${d.tag}/*`], { reject: false });
  expect(perSandbox.stdout.trim()).toBe('');
  expect(after.netns).toBe(node.pool.total);
  expect(node.pool.inUse).toBe(0);
}, 300_000);
