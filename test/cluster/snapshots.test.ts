// Snapshots in a cluster: the snapshot is kept on the compute node that took it (its store), the
// record in MySQL; sandboxes made from it and forks are placed on that node, through a control
// replica, with the real e2b SDK.
import { Sandbox } from 'e2b';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startCluster, type TestCluster } from '../helpers/cluster.js';

let c: TestCluster;
const made: Sandbox[] = [];
const opts = () => ({ apiKey: c.apiKey, apiUrl: c.controls[0]!.url, sandboxUrl: c.controls[0]!.url, timeoutMs: 300_000 });

beforeAll(async () => {
  c = await startCluster({ computes: 2, controls: 1 });
}, 240_000);

afterAll(async () => {
  try {
    await Promise.allSettled(made.map((s) => s.kill()));
  } finally {
    await c?.stop();
  }
}, 120_000);

describe('snapshots across nodes', () => {
  it('a create from a snapshot (by id or name) and a fork land on the node that keeps it, with its files', async () => {
    const origin = await Sandbox.create(opts());
    made.push(origin);
    await origin.files.write('/home/user/c.txt', 'kept on one node');
    const snap = await origin.createSnapshot({ name: 'cluster-snap' });
    const home = (await c.api<{ nodeID: string }>(0, `/admin/v1/sandboxes/${origin.sandboxId}`)).body.nodeID;
    const listed = (await c.api<{ snapshotID: string; nodeID: string }[]>(0, '/admin/v1/snapshots')).body;
    expect(listed).toEqual([expect.objectContaining({ snapshotID: snap.snapshotId, nodeID: home })]);

    // By id, and by name (E2B: Sandbox.create(name) after createSnapshot({ name })).
    for (const ref of [snap.snapshotId, snap.snapshotId, 'cluster-snap']) {
      const copy = await Sandbox.create(ref, opts());
      made.push(copy);
      expect((await c.api<{ nodeID: string }>(0, `/admin/v1/sandboxes/${copy.sandboxId}`)).body.nodeID).toBe(home);
      expect(await copy.files.read('/home/user/c.txt')).toBe('kept on one node');
    }
    const forks = await origin.fork({ count: 2 });
    for (const f of forks) {
      expect(f).toBeInstanceOf(Sandbox);
      made.push(f as Sandbox);
      expect(await (f as Sandbox).files.read('/home/user/c.txt')).toBe('kept on one node');
    }
    expect(await Sandbox.deleteSnapshot('cluster-snap', opts())).toBe(true);
    expect((await c.api<unknown[]>(0, '/admin/v1/snapshots')).body).toEqual([]);
  });
});
