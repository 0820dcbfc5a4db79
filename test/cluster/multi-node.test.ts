// A real cluster on this machine: three compute nodes, each in its own network-namespace test
// host, two control replicas on the machine's Redis + MariaDB (own key prefix and database).
// Every call goes through the control replicas' HTTP API, as a client's would.
import { mkdtempSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { execa } from 'execa';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { EventView, NodeView } from '../../src/api/types.js';
import { RemoteNode } from '../../src/cubelet/remote.js';
import { PLACEMENT_METRICS_MS } from '../../src/control/nodes.js';
import { burst, startCluster, until, type TestCluster } from '../helpers/cluster.js';
import { holdServicesRestarter, withServicesExclusive } from '../helpers/services-lock.js';

// Before the cluster takes the services shared: files that restart them run one at a time.
const releaseRestarter = holdServicesRestarter();

const REDIS_START = [
  '--daemonize',
  'yes',
  '--bind',
  '127.0.0.1',
  '-::1',
  '--port',
  '6379',
  '--save',
  '',
  '--appendonly',
  'no',
  '--dir',
  '/var/lib/redis',
  '--logfile',
  '/var/log/redis/ci.log',
];

let c: TestCluster;
const loopDir = mkdtempSync('/tmp/cubed-test-cluster-loop-');
const loopImg = join(loopDir, 'disk.img');
const loopMnt = join(loopDir, 'cube-disk');
let mounted = false;

const nodes = (i = 1) => c.nodes(i);
const sandboxes = (i = 1) => c.sandboxes(i);
const create = (i: number, body: Record<string, unknown> = {}) => c.create(i, body);
async function destroyAll(): Promise<void> {
  const failed: string[] = [];
  await until('no sandbox left', async () => {
    const left = await sandboxes();
    for (const s of left) {
      const r = await c.api<{ message?: string }>(1, `/admin/v1/sandboxes/${s.sandboxID}`, { method: 'DELETE' });
      if (r.status !== 204 && r.status !== 404) failed.push(`${s.sandboxID} (${s.state}): ${r.status} ${r.body?.message}`);
    }
    return left.length === 0 ? true : undefined;
  });
  // A refused destroy is a finding even when a retry succeeded.
  expect(failed).toEqual([]);
}
const node = (i: number) => c.computes[i - 1]!;

async function ensureServices(): Promise<void> {
  if ((await execa('redis-cli', ['ping'], { reject: false })).stdout !== 'PONG') await execa('redis-server', REDIS_START);
  if ((await execa('mysqladmin', ['-uroot', 'ping'], { reject: false })).exitCode !== 0)
    await execa('start-stop-daemon', ['--start', '--oknodo', '--background', '--exec', '/usr/sbin/mariadbd']);
  await until(
    'Redis and MariaDB up',
    async () =>
      (await execa('redis-cli', ['ping'], { reject: false })).stdout === 'PONG' &&
      (await execa('mysqladmin', ['-uroot', 'ping'], { reject: false })).exitCode === 0
        ? true
        : undefined,
    60_000,
  );
}

beforeAll(async () => {
  await execa('node', [join(import.meta.dirname, '..', '..', 'scripts', 'build-native.mjs')]);
  // Node 3's data dir: a small filesystem of its own, so the test can push it over the watermark.
  await execa('truncate', ['-s', '128M', loopImg]);
  await execa('mkfs.ext4', ['-q', '-F', loopImg]);
  await execa('mkdir', ['-p', loopMnt]);
  await execa('mount', ['-o', 'loop', loopImg, loopMnt]);
  mounted = true;
  c = await startCluster({ computes: 3, controls: 2, master: { scheduler: { priority_select_num: 3 } }, dataDirs: { 3: loopMnt } });
  await until(
    'three healthy schedulable nodes',
    async () => ((await nodes()).filter((n) => n.healthy && n.schedulable).length === 3 ? true : undefined),
    30_000,
  );
}, 300_000);

afterAll(async () => {
  try {
    try {
      await c?.stop();
    } finally {
      if (mounted) await execa('umount', ['-d', loopMnt], { reject: false });
      rmSync(loopDir, { recursive: true, force: true });
      await ensureServices();
    }
  } finally {
    releaseRestarter();
  }
}, 300_000);

describe('cluster of three compute nodes and two control replicas', () => {
  it('registers every node with capacity, templates and its RPC address; any replica answers', async () => {
    for (const i of [0, 1]) {
      const ns = await nodes(i);
      expect(ns.map((n) => n.nodeID).sort()).toEqual(c.computes.map((x) => x.nodeID).sort());
      for (const n of ns)
        expect(n).toMatchObject({
          healthy: true,
          lost: false,
          capacity: { cpus: 16, memoryMiB: 65_536, declared: true },
          address: expect.stringMatching(/^http:\/\/10\.\d+\.\d\.2:7000$/),
        });
      expect(ns.every((n) => n.templates.includes('host'))).toBe(true);
    }
  });

  it('spreads placements over the top priority_select_num nodes, and a sandbox made on one replica is served by the other', async () => {
    const made = await burst(24, 4, (k) => create(k % 2));
    expect(made.map((m) => m.status)).toEqual(Array(24).fill(201));
    const per = new Map<string, number>();
    for (const m of made) per.set(m.body.nodeID, (per.get(m.body.nodeID) ?? 0) + 1);
    expect([...per.keys()].sort()).toEqual(c.computes.map((x) => x.nodeID).sort());

    const one = made[0]!.body;
    const exec = await fetch(`${c.controls[1]!.url}/admin/v1/sandboxes/${one.sandboxID}/exec`, {
      method: 'POST',
      headers: { 'x-api-key': c.apiKey, 'content-type': 'application/json' },
      body: JSON.stringify({ argv: ['sh', '-c', 'echo hi'] }),
    });
    const lines = (await exec.text())
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { type: string; data?: string; exitCode?: number });
    expect(Buffer.from(lines.find((l) => l.type === 'stdout')!.data!, 'base64').toString()).toBe('hi\n');
    expect(lines.at(-1)).toMatchObject({ type: 'end', exitCode: 0 });
    await destroyAll();
  }, 180_000);

  it('sends nothing new to a drained node', async () => {
    const drained = node(1).nodeID;
    expect((await c.api<NodeView>(0, `/admin/v1/nodes/${drained}/drain`, { body: {} })).body).toMatchObject({
      draining: true,
      schedulable: false,
      reason: 'draining',
    });
    try {
      const made = await burst(9, 3, (k) => create(k % 2));
      expect(made.map((m) => m.status)).toEqual(Array(9).fill(201));
      expect(made.filter((m) => m.body.nodeID === drained)).toEqual([]);
      const pinned = await create(1, { nodeID: drained });
      expect(pinned.status).toBe(503);
      expect(pinned.body.message).toContain(`${drained}: draining`);
    } finally {
      await c.api(1, `/admin/v1/nodes/${drained}/uncordon`, { body: {} });
      await destroyAll();
    }
  }, 120_000);

  it('a node over the disk watermark is HEALTHY but unschedulable, and 130597 names it', async () => {
    const full = node(3).nodeID;
    const fill = join(loopMnt, 'cube-fill');
    try {
      // Up to 90% used, counting what is there already (the node's sandbox store image).
      const { stdout } = await execa('df', ['--output=size,used', '-B1', loopMnt]);
      const [size, used] = stdout.split('\n')[1]!.trim().split(/\s+/).map(Number) as [number, number];
      await execa('fallocate', ['-l', String(Math.floor(size * 0.9 - used)), fill]);
      const view = await until('node 3 over the watermark', async () => (await nodes()).find((n) => n.nodeID === full && n.usage.diskUsedPercent >= 80));
      expect(view).toMatchObject({ healthy: true, schedulable: false, reason: expect.stringMatching(/^disk \d+(\.\d)?% >= 80%$/), refusedBy: 'disk' });
      // Placement reads node metrics cached for up to PLACEMENT_METRICS_MS: let every replica's cache turn over.
      await new Promise((r) => setTimeout(r, PLACEMENT_METRICS_MS * 2));
      const refused = await create(0, { nodeID: full });
      expect(refused.status).toBe(503);
      expect(refused.body.code).toBe(130597);
      expect(refused.body.message).toMatch(new RegExp(`^130597 no node available: ${full}: disk `));
      const elsewhere = await burst(6, 3, (k) => create(k % 2));
      expect(elsewhere.filter((m) => m.body.nodeID === full)).toEqual([]);
      const events = (await c.api<EventView[]>(1, '/admin/v1/events?limit=200')).body;
      expect(events.some((e) => e.kind === 'schedule.failed' && e.code === 130597 && e.message.includes(full))).toBe(true);
    } finally {
      rmSync(fill, { force: true });
      await destroyAll();
    }
  }, 120_000);

  it('kill -9 of a control replica mid-burst loses no sandbox', async () => {
    const results: ({ ok: true; id: string } | { ok: false })[] = [];
    const killed = (async () => {
      await until('creates under way', async () => (results.length >= 3 ? true : undefined), 30_000);
      await c.controls[0]!.kill9();
    })();
    try {
      await burst(20, 4, async (k) => {
        const r = await create(k % 2).catch(() => undefined);
        results.push(r?.status === 201 ? { ok: true, id: r.body.sandboxID } : { ok: false });
      });
      await killed;
      const returned = results.flatMap((r) => (r.ok ? [r.id] : []));
      expect(returned.length).toBeGreaterThan(0);
      // Every id a client got is listed; every sandbox a node holds is listed (settled by heartbeats,
      // which are slow when the two cores are saturated: hence the long wait).
      let last = '';
      await until(
        'records match the nodes',
        async () => {
          const records = await sandboxes(1);
          const listed = new Set(records.filter((s) => s.state === 'running').map((s) => s.sandboxID));
          const held = (await Promise.all(c.computes.map((x) => new RemoteNode(x.nodeID, x.url, c.secret).listSandboxes()))).flat();
          last = JSON.stringify({ returned, records: records.map((s) => [s.sandboxID, s.state]), held: held.map((s) => [s.sandboxID, s.state]) });
          return returned.every((id) => listed.has(id)) && held.every((s) => listed.has(s.sandboxID)) && listed.size === held.length ? true : undefined;
        },
        90_000,
      ).catch((e: Error) => {
        throw new Error(`${e.message}; last seen ${last}`);
      });
    } finally {
      // Later tests need both replicas, whatever happened here.
      await killed.catch(() => undefined);
      await c.controls[0]!.start();
      await destroyAll();
    }
  }, 180_000);

  it('survives a Redis restart: routes rebuilt from MySQL, nodes heartbeat again', async () => {
    // No other test file may be using the services while they restart.
    await withServicesExclusive(async () => {
      const made = await burst(3, 3, () => create(1));
      const ids = made.map((m) => m.body.sandboxID).sort();
      try {
        await execa('redis-cli', ['shutdown', 'nosave'], { reject: false });
        await execa('redis-server', REDIS_START);
        await until('sandboxes listed again', async () => {
          const listed = (await sandboxes(0)).map((s) => s.sandboxID).sort();
          return JSON.stringify(listed) === JSON.stringify(ids) ? true : undefined;
        });
        await until('nodes healthy again', async () => ((await nodes(0)).filter((n) => n.healthy).length === 3 ? true : undefined));
        expect((await create(0)).status).toBe(201);
      } finally {
        await ensureServices();
        await destroyAll();
      }
    });
  }, 600_000); // the wait for other files to let go of the services included

  it('survives a MariaDB restart: 503 while it is down, everything back after', async () => {
    // No other test file may be using the services while they restart.
    await withServicesExclusive(async () => {
      const made = await burst(3, 3, () => create(0));
      const ids = made.map((m) => m.body.sandboxID).sort();
      try {
        await execa('start-stop-daemon', ['--stop', '--oknodo', '--retry', '30', '--exec', '/usr/sbin/mariadbd']);
        const down = await create(1);
        expect(down.status).toBe(503);
        expect([130594, 130597]).toContain(down.body.code);
        await execa('start-stop-daemon', ['--start', '--oknodo', '--background', '--exec', '/usr/sbin/mariadbd']);
        await until('MariaDB back and a create succeeds', async () => ((await create(1)).status === 201 ? true : undefined), 60_000);
        const listed = new Set((await sandboxes(0)).map((s) => s.sandboxID));
        expect(ids.every((id) => listed.has(id))).toBe(true);
      } finally {
        await ensureServices();
        await destroyAll();
      }
    });
  }, 600_000); // the wait for other files to let go of the services included

  it('kill -9 of a compute node: lost within three heartbeats, sandboxes marked lost, back when it returns', async () => {
    const victim = node(2);
    const made = await burst(2, 2, () => create(0, { nodeID: victim.nodeID }));
    expect(made.map((m) => m.status)).toEqual([201, 201]);
    await victim.kill9();
    const lost = await until('node lost', async () => (await nodes()).find((n) => n.nodeID === victim.nodeID && n.lost));
    expect(lost).toMatchObject({ healthy: false, schedulable: false, reason: expect.stringMatching(/^lost: last heartbeat \d+\.\ds ago$/) });
    const mine = (await sandboxes()).filter((s) => s.nodeID === victim.nodeID);
    expect(mine.map((s) => s.state)).toEqual(['lost', 'lost']);
    const ev = (await c.api<EventView[]>(0, '/admin/v1/events?limit=200')).body.filter((e) => e.kind === 'node.lost' && e.nodeID === victim.nodeID);
    expect(ev).toHaveLength(1);
    expect(ev[0]!.message).toMatch(/lost \(last heartbeat [0-9.]+s ago\); 2 sandbox\(es\) marked lost$/);
    // No placement on it while it is lost.
    expect((await create(1, { nodeID: victim.nodeID })).body.code).toBe(130597);

    await victim.start();
    await until(
      'node and its sandboxes back',
      async () => {
        const n = (await nodes()).find((x) => x.nodeID === victim.nodeID);
        const states = (await sandboxes()).filter((s) => s.nodeID === victim.nodeID).map((s) => s.state);
        return n?.healthy && !n.lost && states.length === 2 && states.every((s) => s === 'running') ? true : undefined;
      },
      60_000,
    );
    await destroyAll();
  }, 180_000);

  it('delete: 409 unless cordoned and empty', async () => {
    const target = node(1).nodeID;
    const held = await create(0, { nodeID: target });
    expect(held.status).toBe(201);
    expect((await c.api<{ code: number }>(0, `/admin/v1/nodes/${target}`, { method: 'DELETE' })).body.code).toBe(130409);
    await c.api(0, `/admin/v1/nodes/${target}/cordon`, { body: {} });
    const busy = await c.api<{ code: number; message: string }>(0, `/admin/v1/nodes/${target}`, { method: 'DELETE' });
    expect(busy.body).toMatchObject({ code: 130409, message: expect.stringContaining('still holds 1 sandbox') });
    await c.api(0, `/admin/v1/nodes/${target}/uncordon`, { body: {} });
    await destroyAll();
  }, 60_000);
});
