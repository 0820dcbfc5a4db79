// Template builds and removal through a control replica (one replica on the machine's Redis +
// MariaDB, two compute nodes in test hosts): the real `e2b` SDK's Template.build and `cubectl
// template build` against the replica; the build runs on one node, which registers the template;
// the other node runs a sandbox from it after fetching its layers; the build status is read through
// the replica; tags assigned and removed through it. rm through the replica: refused (409) while a sandbox on any node or a template
// built from it uses it, then gone from every node with the layers only it held. A node killed
// mid-build: the status turns error naming the node, and nothing is registered anywhere.
import { mkdtempSync, rmSync } from 'node:fs';
import { mkdir, readdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { Sandbox, Template } from 'e2b';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { NodeView } from '../../src/api/types.js';
import { RemoteNode } from '../../src/cubelet/remote.js';
import { layersRoot, type TemplateRecord } from '../../src/templates/store.js';
import { cubectl } from '../cli/run-cli.js';
import { startCluster, until, type TestCluster } from '../helpers/cluster.js';
import { busyboxLayer, dockerArchive, tarOf } from '../helpers/images.js';

let c: TestCluster;
const dirs = Object.fromEntries([1, 2].map((i) => [i, mkdtempSync(`/tmp/cubed-test-cbuild-${i}-`)]));
const ctxDir = mkdtempSync('/tmp/cubed-test-cbuild-ctx-');
const opts = () => ({ apiKey: c.apiKey, apiUrl: c.controls[0]!.url, sandboxUrl: c.controls[0]!.url });
const nodeID = (i: number) => c.computes[i - 1]!.nodeID;
const view = async (i: number): Promise<NodeView> => (await c.nodes(0)).find((n) => n.nodeID === nodeID(i))!;
/** The compute node (1 or 2) holding template `name`. */
const holderOf = async (name: string): Promise<number[]> => {
  const out: number[] = [];
  for (const i of [1, 2]) if ((await view(i)).templates.includes(name)) out.push(i);
  return out;
};
const layersOn = async (i: number): Promise<string[]> =>
  (await readdir(c.computes[i - 1]!.seen(join(layersRoot(dirs[i]!), 'sha256'))).catch(() => [] as string[]))
    .filter((n) => /^[0-9a-f]{64}$/.test(n))
    .map((n) => `sha256:${n}`);
const e2b = async (method: string, path: string, body?: unknown) => {
  const r = await fetch(`${c.controls[0]!.url}${path}`, {
    method,
    headers: { 'x-api-key': c.apiKey, 'content-type': 'application/json' },
    ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
  });
  const text = await r.text();
  return { status: r.status, json: (text ? JSON.parse(text) : {}) as Record<string, unknown> & { message?: string } };
};

beforeAll(async () => {
  c = await startCluster({ computes: 2, controls: 1, dataDirs: dirs });
  await until(
    'two healthy nodes that fetch templates',
    async () => ((await c.nodes(0)).filter((n) => n.healthy && n.layers !== undefined).length === 2 ? true : undefined),
    60_000,
  );
  await mkdir(join(ctxDir, 'app'));
  await writeFile(join(ctxDir, 'app', 'hello.txt'), 'hello from the cluster build\n');
  // busybox on node 1 only: a build placed on node 2 fetches it first.
  const res = await fetch(`${c.controls[0]!.url}/admin/v1/templates/import?name=busybox&node=${nodeID(1)}`, {
    method: 'POST',
    headers: { 'x-api-key': c.apiKey, 'content-type': 'application/octet-stream' },
    body: await dockerArchive([await tarOf(busyboxLayer())], { Env: ['PATH=/bin:/usr/bin'] }),
  });
  expect(res.status, await res.clone().text()).toBe(201);
  await until('node 1 reports busybox', async () => ((await view(1)).templates.includes('busybox') ? true : undefined));
}, 300_000);

afterAll(async () => {
  try {
    await c?.stop();
  } finally {
    for (const d of [...Object.values(dirs), ctxDir]) rmSync(d, { recursive: true, force: true });
  }
}, 300_000);

describe('template builds through a control replica', () => {
  let built: string[] = [];

  it('Template.build of the e2b SDK runs on a node, registers the template there, and a sandbox on the other node runs from it', async () => {
    const lines: string[] = [];
    const t = Template({ fileContextPath: ctxDir })
      .fromImage('busybox')
      .setEnvs({ GREETING: 'hi' })
      .runCmd('echo built-$GREETING > /home/user/marker && echo step-output-$GREETING')
      .copy('app', '/opt/app/')
      .setWorkdir('/opt/app');
    const info = await Template.build(t, 'cbuilt', { ...opts(), onBuildLogs: (e) => lines.push(e.message) });
    expect(info).toMatchObject({ templateId: 'cbuilt' });
    expect(lines.join('\n')).toMatch(/step-output-hi/);
    expect(lines.join('\n')).toMatch(/Uploaded 'app'/);
    const holders = await until('one node reports cbuilt', async () => {
      const h = await holderOf('cbuilt');
      return h.length ? h : undefined;
    });
    expect(holders).toHaveLength(1);
    const other = holders[0] === 1 ? 2 : 1;
    const rec = (await c.api<TemplateRecord>(0, '/admin/v1/templates/cbuilt')).body;
    expect(rec).toMatchObject({ ref: 'cbuilt:latest', source: 'build' });
    built = rec.layers;
    const created = await c.create(0, { templateID: 'cbuilt', nodeID: nodeID(other) });
    expect(created.status, created.body.message).toBe(201);
    const s = await Sandbox.connect(created.body.sandboxID, opts());
    try {
      const r = await s.commands.run('cat /home/user/marker /opt/app/hello.txt; echo $GREETING; pwd');
      expect(r).toMatchObject({ exitCode: 0, stdout: 'built-hi\nhello from the cluster build\nhi\n/opt/app\n' });
    } finally {
      await s.kill();
    }
    // The status stays readable through the replica once the build is done.
    const detail = await e2b('GET', '/templates/cbuilt');
    expect(detail.status, detail.json.message).toBe(200);
    const builds = detail.json.builds as { buildID: string; status: string }[];
    expect(builds.map((b) => b.status)).toContain('ready');
    const st = await e2b('GET', `/templates/cbuilt/builds/${builds[0]!.buildID}/status`);
    expect(st.json).toMatchObject({ status: 'ready' });
  }, 300_000);

  it('tags through the replica: assignTags on every node holding the template, a sandbox of NAME:TAG, removeTags from every node', async () => {
    await Template.assignTags('cbuilt', 'stable', opts());
    expect((await Template.getTags('cbuilt', opts())).map((t) => t.tag).sort()).toEqual(['latest', 'stable']);
    // Both nodes hold cbuilt (one built it, the other fetched it for the first test's sandbox): both are tagged.
    await until('both nodes list cbuilt:stable', async () => ((await holderOf('cbuilt:stable')).length === 2 ? true : undefined));
    const created = await c.create(0, { templateID: 'cbuilt:stable', nodeID: nodeID(2) });
    expect(created.status, created.body.message).toBe(201);
    await c.api(0, `/admin/v1/sandboxes/${created.body.sandboxID}`, { method: 'DELETE' });
    await Template.removeTags('cbuilt', 'stable', opts());
    await until('cbuilt:stable gone from both nodes', async () => ((await holderOf('cbuilt:stable')).length === 0 ? true : undefined));
    expect((await Template.getTags('cbuilt', opts())).map((t) => t.tag)).toEqual(['latest']);
  }, 300_000);

  it('cubectl template build through the replica: a failing step gives its exit code and output tail, and registers nothing', async () => {
    const env = { CUBE_API_URL: c.controls[0]!.url, CUBE_API_KEY: c.apiKey };
    const recipe = join(ctxDir, 'fail.yaml');
    await writeFile(recipe, ['name: cfail', 'fromImage: busybox', 'steps:', '  - run: {cmd: "echo about-to-fail; exit 7"}', ''].join('\n'));
    const r = await cubectl(['template', 'build', recipe], env);
    expect(r.code).not.toBe(0);
    expect(r.stderr).toMatch(/exited 7/);
    expect(r.stderr).toMatch(/about-to-fail/);
    expect(await holderOf('cfail')).toEqual([]);
  }, 300_000);

  it('rm through the replica: 409 while a child template uses it; while a sandbox runs from it, gone from every node, its layers kept on its node until it ends', async () => {
    const child = await Template.build(Template().fromTemplate('cbuilt').runCmd('echo child > /home/user/child'), 'cchild', opts());
    expect(child).toMatchObject({ templateId: 'cchild' });
    const parentRefused = await c.api<{ message: string }>(0, '/admin/v1/templates/cbuilt', { method: 'DELETE' });
    expect(parentRefused.status).toBe(409);
    expect(parentRefused.body.message).toMatch(/cbuilt:latest is the parent of cchild:latest/);
    expect((await e2b('DELETE', '/templates/cchild')).status).toBe(204);
    await until('cchild gone from every node', async () => ((await holderOf('cchild')).length === 0 ? true : undefined));

    // Both nodes hold cbuilt now (one built it, the other fetched it). An rm while a sandbox runs from
    // it on one: gone from both, the layers kept on that node until the sandbox ends.
    const holders = await holderOf('cbuilt');
    expect(holders.sort()).toEqual([1, 2]);
    const sbx = await c.create(0, { templateID: 'cbuilt', nodeID: nodeID(2) });
    expect(sbx.status, sbx.body.message).toBe(201);
    const removed = await c.api<TemplateRecord & { message?: string }>(0, '/admin/v1/templates/cbuilt', { method: 'DELETE' });
    expect(removed.status, removed.body.message).toBe(200);
    expect(removed.body.ref).toBe('cbuilt:latest');
    await until('cbuilt gone from both nodes', async () => ((await holderOf('cbuilt')).length === 0 ? true : undefined));
    const own = built.filter((l) => !l.startsWith('/'));
    const busybox = (await c.api<TemplateRecord>(0, '/admin/v1/templates/busybox')).body.layers;
    const onlyBuilt = own.filter((l) => !busybox.includes(l));
    expect(onlyBuilt.length).toBeGreaterThan(0);
    await until('the build layers leave node 1', async () => ((await layersOn(1)).some((l) => onlyBuilt.includes(l)) ? undefined : true));
    expect((await layersOn(2)).filter((l) => onlyBuilt.includes(l)).sort()).toEqual([...onlyBuilt].sort());
    await c.api(0, `/admin/v1/sandboxes/${sbx.body.sandboxID}`, { method: 'DELETE' });
    await until('the build layers leave node 2 once its sandbox ended', async () =>
      (await layersOn(2)).some((l) => onlyBuilt.includes(l)) ? undefined : true,
    );
    expect((await c.api(0, '/admin/v1/templates/cbuilt', { method: 'DELETE' })).status).toBe(404);
  }, 300_000);

  it("shows a client's own import, tag and rm through the replica in its very next list and inspect (read-your-writes)", async () => {
    // The replica lists the registry the nodes' heartbeats write: without the write-through, a list
    // right after the import lacked the template for up to a heartbeat.
    const listed = async () =>
      new Map((await c.api<{ templateID: string; nodes: string[] }[]>(0, '/admin/v1/templates')).body.map((t) => [t.templateID, t.nodes]));
    const body = await dockerArchive([await tarOf(busyboxLayer())], {});
    for (let i = 0; i < 2; i++) {
      const res = await fetch(`${c.controls[0]!.url}/admin/v1/templates/import?name=cryw&node=${nodeID(2)}`, {
        method: 'POST',
        headers: { 'x-api-key': c.apiKey, 'content-type': 'application/octet-stream' },
        body,
      });
      expect(res.status, await res.clone().text()).toBe(201);
      expect((await listed()).get('cryw')).toEqual([nodeID(2)]);
      // Inspect too: it looked for a holder in the node views only, which lag by a heartbeat (404).
      expect((await c.api(0, '/admin/v1/templates/cryw')).status).toBe(200);
      await Template.assignTags('cryw', 'next', opts());
      expect((await listed()).get('cryw:next')).toEqual([nodeID(2)]);
      expect((await c.api(0, '/admin/v1/templates/cryw:next')).status).toBe(200);
      for (const ref of ['cryw:next', 'cryw']) expect((await c.api(0, `/admin/v1/templates/${ref}`, { method: 'DELETE' })).status).toBe(200);
      const after = await listed();
      expect([after.has('cryw'), after.has('cryw:next')]).toEqual([false, false]);
    }
  }, 300_000);

  it('a node killed mid-build: the status turns error naming the node, and nothing is registered', async () => {
    const req = await e2b('POST', '/v3/templates', { name: 'cdies' });
    expect(req.status, req.json.message).toBe(202);
    const buildID = req.json.buildID as string;
    const start = await e2b('POST', `/v2/templates/cdies/builds/${buildID}`, {
      fromImage: 'busybox',
      steps: [{ type: 'RUN', args: ['echo started; sleep 600'], force: false }],
    });
    expect(start.status, start.json.message).toBe(202);
    await until(
      'the step runs',
      async () => {
        const st = await e2b('GET', `/templates/cdies/builds/${buildID}/status`);
        return (st.json.logEntries as { message: string }[]).some((l) => l.message === 'started') ? true : undefined;
      },
      120_000,
    );
    // Which node runs it: the one whose node API knows the build.
    let runner = 0;
    for (const i of [1, 2]) {
      const n = c.computes[i - 1]!;
      if (
        await new RemoteNode(n.nodeID, n.url, c.secret).buildGet('cdies', buildID).then(
          () => true,
          () => false,
        )
      )
        runner = i;
    }
    expect(runner).not.toBe(0);
    await c.computes[runner - 1]!.kill9();
    const st = await until(
      'the status says error',
      async () => {
        const s = await e2b('GET', `/templates/cdies/builds/${buildID}/status`);
        return s.json.status === 'error' ? s.json : undefined;
      },
      60_000,
    );
    expect((st.reason as { message: string }).message).toMatch(
      new RegExp(`node ${nodeID(runner)}, which ran the build, went away \\(.*\\): the build ended there and registered nothing`),
    );
    // The node back: the build it lost is an error there too, the answer through the replica stays, and no node lists the template.
    await c.computes[runner - 1]!.start();
    await until('the node healthy again', async () => ((await view(runner)).healthy ? true : undefined), 60_000);
    const again = await e2b('GET', `/templates/cdies/builds/${buildID}/status`);
    expect(again.json).toMatchObject({ status: 'error' });
    expect(await holderOf('cdies')).toEqual([]);
  }, 300_000);
});
