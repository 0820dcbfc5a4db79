// Volumes in a cluster, with the real e2b SDK through a control replica: the volume is made on a
// compute node (its store), the record is in MySQL, its content goes over the node RPC, and a
// sandbox that mounts it is placed on that node; while the node is down, creates that mount it are
// refused naming the volume.
import { Sandbox, Volume, VolumeError } from 'e2b';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startCluster, type TestCluster } from '../helpers/cluster.js';

let c: TestCluster;
const made: Sandbox[] = [];
const opts = () => ({ apiKey: c.apiKey, apiUrl: c.controls[0]!.url, sandboxUrl: c.controls[0]!.url, timeoutMs: 300_000 });

beforeAll(async () => {
  c = await startCluster({ computes: 2, controls: 1 });
  process.env.E2B_VOLUME_API_URL = c.controls[0]!.url;
}, 240_000);

afterAll(async () => {
  try {
    await Promise.allSettled(made.map((s) => s.kill()));
    for (const v of c ? await Volume.list(opts()) : []) await Volume.destroy(v.volumeId, opts());
  } finally {
    delete process.env.E2B_VOLUME_API_URL;
    await c?.stop();
  }
}, 120_000);

const until = async (what: string, ok: () => Promise<boolean>): Promise<void> => {
  for (let i = 0; i < 300; i++) {
    if (await ok()) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`timed out waiting for ${what}`);
};

describe('volumes across nodes', () => {
  it('sandboxes that mount a volume land on its node; its content goes over the node RPC; a down node refuses them by name', async () => {
    const vol = await Volume.create('cv-data', opts());
    const listed = (await c.api<{ volumeID: string; nodeID: string }[]>(0, '/admin/v1/volumes')).body;
    expect(listed).toEqual([expect.objectContaining({ volumeID: vol.volumeId })]);
    const home = listed[0]!.nodeID;
    expect(c.computes.map((n) => n.nodeID)).toContain(home);
    await vol.writeFile('/seed.txt', 'over the node RPC\n');
    expect(await vol.readFile('/seed.txt')).toBe('over the node RPC\n');
    expect((await vol.list('/')).map((e) => e.name)).toEqual(['seed.txt']);

    for (let i = 0; i < 3; i++) {
      const s = await Sandbox.create({ ...opts(), volumeMounts: { '/data': 'cv-data' } });
      made.push(s);
      expect((await c.api<{ nodeID: string }>(0, `/admin/v1/sandboxes/${s.sandboxId}`)).body.nodeID).toBe(home);
      expect((await s.commands.run('cat /data/seed.txt')).stdout).toBe('over the node RPC\n');
      await s.commands.run(`echo ${i} >> /data/log`);
    }
    expect(await vol.readFile('/log')).toBe('0\n1\n2\n');
    const busy = await Volume.destroy(vol.volumeId, opts()).catch((e: unknown) => e);
    expect(busy).toBeInstanceOf(VolumeError);
    expect((busy as Error).message).toMatch(/409.*mounted by 3 sandboxes/);
    for (const s of made.splice(0)) await s.kill();

    // Its node down (killed, then marked lost): a create that mounts it is refused by name.
    const node = c.computes.find((n) => n.nodeID === home)!;
    await node.kill9();
    await until('the node marked lost', async () => (await c.nodes(0)).some((n) => n.nodeID === home && n.lost));
    const refused = await Sandbox.create({ ...opts(), volumeMounts: { '/data': 'cv-data' } }).catch((e: unknown) => e);
    expect((refused as Error).message).toMatch(/422.*volume cv-data is on node .*, which is lost/);
    await node.start();
    await until('the node back', async () => (await c.nodes(0)).some((n) => n.nodeID === home && !n.lost));
    expect(await vol.readFile('/log')).toBe('0\n1\n2\n');
    expect(await Volume.destroy(vol.volumeId, opts())).toBe(true);
  });

  it('a create that mounts volumes of two nodes is refused with 409 (130434), naming them', async () => {
    const [a, b] = c.computes;
    for (const [name, node] of [
      ['cv-on-a', a!],
      ['cv-on-b', b!],
    ] as const) {
      const r = await c.api<{ nodeID: string }>(0, '/admin/v1/volumes', { method: 'POST', body: { name, nodeID: node.nodeID, sizeGiB: 0.1 } });
      expect(r.status).toBe(201);
      expect(r.body.nodeID).toBe(node.nodeID);
    }
    const e = await Sandbox.create({ ...opts(), volumeMounts: { '/a': 'cv-on-a', '/b': 'cv-on-b' } }).catch((x: unknown) => x);
    expect((e as Error).message).toMatch(
      new RegExp(`409: 130434 volume cv-on-b \\(vol-[a-z0-9]+\\) is on node ${b!.nodeID}, but another of its volumes is on node ${a!.nodeID}`),
    );
    for (const v of await Volume.list(opts())) await Volume.destroy(v.volumeId, opts());
  });
});
