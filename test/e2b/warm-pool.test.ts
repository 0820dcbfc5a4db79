// Warm pools (issue 26 item 3) through a real daemon and the unchanged `e2b` SDK: a template
// with a start command gets a warm sandbox after its first create, the next create takes it with
// its own identity, the pool refills, yields to density, stays out of users' lists, and a restart
// or a kill leaves nothing behind (stop() checks every kernel object of the node).
import { mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Sandbox, Volume } from 'e2b';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { NodeView } from '../../src/model/node.js';
import { cubectl } from '../cli/run-cli.js';
import { until } from '../helpers/cluster.js';
import { call, startDaemon, type TestDaemon } from '../helpers/daemon.js';
import { busyboxLayer, dockerArchive, tarOf } from '../helpers/images.js';
import { slotRules } from '../helpers/kernel.js';
import { sdkClient, type SdkClient } from '../helpers/sdk.js';

let d: TestDaemon;
let sdk: SdkClient;
let scratch: string;

type Warm = NonNullable<NodeView['warm']>;

async function warm(): Promise<Warm | undefined> {
  const r = await call(d, 'GET', '/admin/v1/nodes');
  return (r.json as NodeView[])[0]?.warm;
}

/** Waits for the pool of `template` to hold `ready` ready sandboxes and none being made. */
async function poolAt(template: string, ready: number): Promise<Warm> {
  return until(
    `warm pool of ${template} at ${ready}`,
    async () => {
      const w = await warm();
      const t = w?.templates[template] ?? { ready: 0, starting: 0 };
      return t.ready === ready && t.starting === 0 ? (w ?? { templates: {}, footprintMiB: 0, hits: 0, misses: 0 }) : undefined;
    },
    60_000,
  );
}

/** Sandbox cgroups of the node now: its parent cgroup's children in the memory hierarchy (the daemon runs in this process's cgroup). */
async function sandboxCgroups(): Promise<number> {
  const own = (await readFile('/proc/self/cgroup', 'utf8')).match(/^\d+:memory:(.*)$/m)?.[1] ?? '/';
  const dir = join('/sys/fs/cgroup/memory', own, `cube-${d.tag}`);
  return (await readdir(dir, { withFileTypes: true }).catch(() => [])).filter((e) => e.isDirectory() && /^[a-z][a-z0-9]{19}$/.test(e.name)).length;
}

const set = (key: string, value: string) => cubectl(['config', 'set', key, value], sdk.env);

beforeAll(async () => {
  d = await startDaemon({ cubelet: { warm_pool: { size: 1 } } });
  sdk = sdkClient(d);
  scratch = await mkdtemp(join(tmpdir(), 'cubed-test-warm-'));
  await writeFile(join(scratch, 'base.tar'), await dockerArchive([await tarOf(busyboxLayer())], {}));
  // The start command leaves its pid; ready once it did.
  const imp = await cubectl(
    [
      'template',
      'import',
      join(scratch, 'base.tar'),
      '--name',
      'warm',
      '--start-cmd',
      'echo $$ > /tmp/start.pid; exec sleep 1000',
      '--ready-cmd',
      'test -s /tmp/start.pid',
    ],
    sdk.env,
  );
  expect(imp.stderr).toBe('');
});

afterAll(async () => {
  try {
    await sdk?.killAll();
  } finally {
    await d?.stop();
    await rm(scratch, { recursive: true, force: true });
  }
});

describe('warm pools', () => {
  it('keeps a warm sandbox after the first create, hands it to the next with its own identity, refills, stays out of lists', async () => {
    const first = await sdk.create('warm');
    await poolAt('warm', 1);
    expect(await sandboxCgroups()).toBe(2); // the first and the warm one
    // Warm sandboxes are not users' sandboxes: the real SDK's list shows the first alone.
    expect((await Sandbox.list(sdk.opts).nextItems()).map((s) => s.sandboxId)).toEqual([first.sandboxId]);

    expect((await slotRules(d.tag)).size).toBe(0);
    const claimed = await sdk.create('warm', { envs: { FOO: 'from-create' }, metadata: { who: 'claimer' }, timeoutMs: 600_000, allowInternetAccess: false });
    // Its egress rules are on its slot (keyed by the id it was made with) before the create answers.
    expect([...(await slotRules(d.tag)).values()].flat().join('\n')).toMatch(/drop/);
    // A create right after: cold when the refill has not made another yet (it may have: this start
    // command is ready at once, so which one is a race), and it works either way.
    const cold = await sdk.create('warm');
    const w = (await warm())!;
    expect(w.hits + w.misses).toBe(2);
    expect(w.hits).toBeGreaterThanOrEqual(1);
    expect(w.templates.warm).toMatchObject({ target: 1 });

    // The claimed sandbox: the create's env, metadata and timeout; the start command still running.
    const r = await claimed.commands.run('echo $FOO; cat /proc/$(cat /tmp/start.pid)/comm');
    expect(r).toMatchObject({ exitCode: 0, stdout: 'from-create\nsleep\n' });
    const info = await Sandbox.getInfo(claimed.sandboxId, sdk.opts);
    expect(info.metadata).toEqual({ who: 'claimer' });
    // The create's timeout (the control sets endAt, the node startedAt: a few ms apart; a warm sandbox's own start is minutes back).
    expect(Math.abs(info.endAt.getTime() - info.startedAt.getTime() - 600_000)).toBeLessThan(5_000);
    expect((await cold.commands.run('echo ok')).stdout).toBe('ok\n');

    // The pool refills in the background; still nobody's sandbox.
    await poolAt('warm', 1);
    const listed = (await Sandbox.list(sdk.opts).nextItems()).map((s) => s.sandboxId).sort();
    expect(listed).toEqual([first.sandboxId, claimed.sandboxId, cold.sandboxId].sort());
    expect(await sandboxCgroups()).toBe(4);

    // A kill of the claimed one removes all of it (its objects are keyed by the id it was made with).
    await claimed.kill();
    await until('the claimed sandbox gone', async () => ((await sandboxCgroups()) === 3 ? true : undefined));
    // Its slot's rules go with the slot's reset, after the delete answered (network release runs
    // in the background): CI on a slow machine read them once between the two.
    await until('the claimed sandbox rules gone', async () => ((await slotRules(d.tag)).size === 0 ? true : undefined));
    await first.kill();
    await cold.kill();
  }, 180_000);

  it('makes a create of another memory size, or with volumes, cold', async () => {
    await poolAt('warm', 1);
    const before = (await warm())!;
    const r = await call(d, 'POST', '/admin/v1/sandboxes', { templateID: 'warm', memoryMiB: 320 });
    expect(r.status).toBe(201);
    const id = (r.json as { sandboxID: string }).sandboxID;
    const after = (await warm())!;
    expect(after).toMatchObject({ hits: before.hits, misses: before.misses + 1 });
    expect(after.templates.warm!.ready).toBe(1); // the warm one stays for a create it fits
    expect((await call(d, 'DELETE', `/admin/v1/sandboxes/${id}`)).status).toBe(204);
    // Volumes are mounted at create: a cold create, with the volume there.
    const vol = await Volume.create('warm-vol', sdk.opts);
    try {
      const withVol = await sdk.create('warm', { volumeMounts: { '/data': vol } });
      expect(await warm()).toMatchObject({ hits: before.hits, misses: before.misses + 2 });
      expect((await withVol.commands.run('echo hi > /data/f && cat /data/f')).stdout).toBe('hi\n');
      await withVol.kill();
    } finally {
      await Volume.destroy(vol.volumeId, sdk.opts);
    }
  }, 180_000);

  it('yields to density: a node with no room for one more holds none, and a create needing the room gets it', async () => {
    await poolAt('warm', 1);
    const real = await sdk.create('warm'); // takes the warm one
    await poolAt('warm', 1);
    try {
      // Room for the real sandbox alone: the warm one gives its room back (out of the pool at once,
      // its destroy under way: CI counted its cgroup once right after the pool said 0).
      expect((await set('scheduler.node_max_mvm_num', '1')).code).toBe(0);
      await poolAt('warm', 0);
      await until('the warm sandbox destroyed', async () => ((await sandboxCgroups()) === 1 ? true : undefined), 30_000);
      // The node view counts only the real one, so the node still admits what it has room for.
      const node = ((await call(d, 'GET', '/admin/v1/nodes')).json as NodeView[])[0]!;
      expect(node.sandboxes.total).toBe(1);
      // Room for two: the warm one comes back beside the real one; a create of another template
      // needs its room, and the node gives it back before the create is made (the control plane
      // admitted it: warm sandboxes are not in the node's counts).
      expect((await set('scheduler.node_max_mvm_num', '2')).code).toBe(0);
      await poolAt('warm', 1);
      const other = await call(d, 'POST', '/admin/v1/sandboxes', { templateID: 'host' });
      expect(other.status).toBe(201);
      expect((await warm())!.templates.warm).toMatchObject({ ready: 0 });
      expect(await sandboxCgroups()).toBe(2);
      expect((await call(d, 'DELETE', `/admin/v1/sandboxes/${(other.json as { sandboxID: string }).sandboxID}`)).status).toBe(204);
      await poolAt('warm', 1);
    } finally {
      // The later tests need the room back, also when this one failed.
      expect((await set('scheduler.node_max_mvm_num', '3000')).code).toBe(0);
    }
    await real.kill();
  }, 180_000);

  it('drops the warm sandboxes of a template imported anew, and of one removed: its creates are refused', async () => {
    await poolAt('warm', 1);
    await writeFile(join(scratch, 'other.tar'), await dockerArchive([await tarOf([...busyboxLayer(), { name: 'etc/v2', content: 'v2\n' }])], {}));
    const start = ['--start-cmd', 'echo $$ > /tmp/start.pid; exec sleep 1000', '--ready-cmd', 'test -s /tmp/start.pid'];
    expect((await cubectl(['template', 'import', join(scratch, 'other.tar'), '--name', 'gone', ...start], sdk.env)).code).toBe(0);
    await sdk.create('gone').then((s) => s.kill());
    await poolAt('gone', 1);
    // Imported anew under the same name: a create gets the new content, never the old warm one.
    expect((await cubectl(['template', 'import', join(scratch, 'base.tar'), '--name', 'gone', ...start], sdk.env)).code).toBe(0);
    const fresh = await sdk.create('gone');
    expect((await fresh.commands.run('test -e /etc/v2 && echo old || echo new')).stdout).toBe('new\n');
    await fresh.kill();
    await poolAt('gone', 1);
    expect((await cubectl(['template', 'rm', 'gone'], sdk.env)).code).toBe(0);
    await poolAt('gone', 0);
    await expect(sdk.create('gone')).rejects.toThrow(/not found/i);
    // Its pool is no longer wanted once a refill found the template gone.
    await until('the removed template no longer wanted', async () => ((await warm())?.templates.gone === undefined ? true : undefined));
  }, 180_000);

  it('takes a size per template live (cubectl config set), and /metrics shows the pools and the claims', async () => {
    await poolAt('warm', 1);
    expect((await set('warm_pool.templates', '{"warm":2}')).code).toBe(0);
    await poolAt('warm', 2);
    const metrics = await (await fetch(`${d.url}/metrics`)).text();
    const w = (await warm())!;
    expect(metrics).toContain(`cubed_warm_sandboxes{node="${d.nodeID}",template="warm",state="ready"} 2`);
    expect(metrics).toContain(`cubed_warm_sandboxes{node="${d.nodeID}",template="warm",state="target"} 2`);
    expect(metrics).toContain(`cubed_warm_claims_total{node="${d.nodeID}",result="hit"} ${w.hits}`);
    expect(metrics).toContain(`cubed_warm_claims_total{node="${d.nodeID}",result="miss"} ${w.misses}`);
    expect((await set('warm_pool.templates', '{}')).code).toBe(0);
    await poolAt('warm', 1);
  }, 180_000);

  it('a restart destroys warm sandboxes and takes back a claimed one under its own id', async () => {
    await poolAt('warm', 1);
    const claimed = await sdk.create('warm', { envs: { FOO: 'kept' } });
    await poolAt('warm', 1);
    // Killed: the warm sandbox is still on the host for the next start to find.
    await d.kill9();
    await d.restart();
    // The claimed one is back (its objects found by the id it was made with), the warm one gone.
    expect((await Sandbox.list(sdk.opts).nextItems()).map((s) => s.sandboxId)).toEqual([claimed.sandboxId]);
    const again = await Sandbox.connect(claimed.sandboxId, sdk.opts);
    expect((await again.commands.run('echo $FOO')).stdout).toBe('kept\n');
    await until('the warm sandbox destroyed', async () => ((await sandboxCgroups()) === 1 ? true : undefined));
    await again.kill();
    // Pool size 0: nothing is made, and nothing of any sandbox is left.
    expect((await set('warm_pool.size', '0')).code).toBe(0);
    await sdk.create('warm').then((s) => s.kill());
    await poolAt('warm', 0);
    // A dropped warm sandbox leaves the pool before its destroy ends.
    await until('no sandbox left', async () => ((await sandboxCgroups()) === 0 ? true : undefined)); // the rest of the node's objects: afterAll's stop() checks them
  }, 180_000);
});
