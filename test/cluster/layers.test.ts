// Layer distribution in a real cluster (three compute nodes in test hosts, one control replica on
// the machine's Redis + MariaDB): an image imported through the control replica lands on one node;
// a create placed on another node fetches the template's layers by digest through the control
// plane, checks them and runs the sandbox from them; a layer damaged in the holder's store fails
// the create with 130424 naming it (and the layers that came before it leave again); creates of a template being fetched wait for the one fetch;
// placement prefers the nodes holding the template; a node whose store cannot hold the layers fails
// the create at once with 130598 naming the sizes and writes nothing.
import { mkdtempSync, rmSync } from 'node:fs';
import { readdir, truncate, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { Sandbox } from 'e2b';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { EventView, NodeView } from '../../src/api/types.js';
import { layerDir, layersRoot, type TemplateRecord } from '../../src/templates/store.js';
import { startCluster, until, type TestCluster } from '../helpers/cluster.js';
import { busyboxLayer, dockerArchive, tarOf } from '../helpers/images.js';

let c: TestCluster;
const dirs = Object.fromEntries([1, 2, 3].map((i) => [i, mkdtempSync(`/tmp/cubed-test-layers-${i}-`)]));
const opts = () => ({ apiKey: c.apiKey, apiUrl: c.controls[0]!.url, sandboxUrl: c.controls[0]!.url });
const nodeID = (i: number) => c.computes[i - 1]!.nodeID;

/** An image of busybox plus a layer of its own (`tag` makes its digest unique). */
async function image(tag: string): Promise<Buffer> {
  const base = await tarOf(busyboxLayer());
  const top = await tarOf([{ name: 'opt/', type: 'directory' }, { name: `opt/${tag}`, content: `layer of ${tag}\n` }, { name: 'etc/.wh.group' }]);
  return dockerArchive([base, top], { Env: ['PATH=/bin:/usr/bin'] });
}

/** Imports through the control replica onto node `i`. */
async function importOn(i: number, name: string): Promise<TemplateRecord> {
  const res = await fetch(`${c.controls[0]!.url}/admin/v1/templates/import?name=${name}&node=${nodeID(i)}`, {
    method: 'POST',
    headers: { 'x-api-key': c.apiKey, 'content-type': 'application/octet-stream' },
    body: await image(name),
  });
  const body = (await res.json()) as TemplateRecord & { message?: string };
  expect(res.status, body.message).toBe(201);
  await until(`node ${i} reports ${name} and its layers`, async () => {
    const v = await view(i);
    return v.templates.includes(name) && body.layers.every((l) => v.layers?.includes(l)) ? true : undefined;
  });
  return body;
}

const view = async (i: number): Promise<NodeView> => (await c.nodes(0)).find((n) => n.nodeID === nodeID(i))!;
const fetchEvents = async (i: number, template: string): Promise<string[]> =>
  (await c.api<EventView[]>(0, '/admin/v1/events?limit=1000')).body
    .filter((e) => e.kind === 'template.fetch' && e.nodeID === nodeID(i) && e.message.includes(`${template}:latest`))
    .map((e) => e.message);

beforeAll(async () => {
  c = await startCluster({
    computes: 3,
    controls: 1,
    dataDirs: dirs,
    master: { scheduler: { priority_select_num: 2, score: { enable_scorers: ['template_locality'] } } },
  });
  await until(
    'three healthy nodes that fetch templates',
    async () => ((await c.nodes(0)).filter((n) => n.healthy && n.layers !== undefined).length === 3 ? true : undefined),
    60_000,
  );
}, 300_000);

afterAll(async () => {
  try {
    await c?.stop();
  } finally {
    for (const d of Object.values(dirs)) rmSync(d, { recursive: true, force: true });
  }
}, 300_000);

describe('layer distribution', () => {
  it('an image imported on node 1 runs on node 2, which fetched its layers through the control plane', async () => {
    const rec = await importOn(1, 'dist');
    expect((await view(2)).templates).not.toContain('dist');
    const created = await c.create(0, { templateID: 'dist', nodeID: nodeID(2) });
    expect(created.status, created.body.message).toBe(201);
    expect(created.body).toMatchObject({ nodeID: nodeID(2), state: 'running' });
    const s = await Sandbox.connect(created.body.sandboxID, opts());
    try {
      expect((await s.commands.run('cat /opt/dist')).stdout).toBe('layer of dist\n');
      expect((await s.commands.run('ls /etc')).stdout).not.toMatch(/\bgroup\b/); // the whiteout came along
    } finally {
      await s.kill();
    }
    await until('node 2 reports the template and every layer', async () => {
      const v = await view(2);
      return v.templates.includes('dist') && rec.layers.every((l) => v.layers?.includes(l)) ? true : undefined;
    });
    const ev = await until('node 2 fetch events', async () => {
      const m = await fetchEvents(2, 'dist');
      return m.some((x) => x.startsWith('template dist:latest ready')) ? m : undefined;
    });
    expect(ev).toEqual(
      expect.arrayContaining([
        expect.stringMatching(/^fetching template dist:latest for a create: \d of \d layer/),
        expect.stringMatching(/^layer 2\/3 \(sha256:[0-9a-f]{64}\) of template dist:latest fetched and verified/),
      ]),
    );
  }, 180_000);

  it('places creates on the nodes holding the template (template_locality scorer)', async () => {
    // Nodes 1 and 2 hold `dist`, node 3 does not: with locality the only scorer and the top 2 picked from, every create lands on a holder.
    const placed: string[] = [];
    for (let k = 0; k < 4; k++) {
      const r = await c.create(0, { templateID: 'dist' });
      expect(r.status, r.body.message).toBe(201);
      placed.push(r.body.nodeID);
      await c.api(0, `/admin/v1/sandboxes/${r.body.sandboxID}`, { method: 'DELETE' });
    }
    expect(placed.filter((n) => n === nodeID(3))).toEqual([]);
  }, 120_000);

  it('a layer damaged in the holder store fails the create with 130424 naming the layer, and leaves nothing on the fetching node', async () => {
    const rec = await importOn(1, 'bad');
    const top = rec.layers[1]!;
    await writeFile(c.computes[0]!.seen(join(layerDir(dirs[1]!, top), 'opt', 'bad')), 'tampered\n');
    const r = await c.create(0, { templateID: 'bad', nodeID: nodeID(3) });
    expect(r.status).toBe(502);
    expect(r.body).toMatchObject({ code: 130424, message: expect.stringContaining(`layer 2/3 (${top}) of template bad:latest failed verification`) });
    const v = await view(3);
    expect(v.templates).not.toContain('bad');
    expect(v.layers).not.toContain(top);
    expect(await readdir(c.computes[2]!.seen(join(layersRoot(dirs[3]!), 'tmp')))).toEqual([]);
    // The layers that did check out went again: node 3 holds no template but host.
    expect(await readdir(c.computes[2]!.seen(join(layersRoot(dirs[3]!), 'sha256')))).toEqual([]);
    const ev = await until('the failure as a node event', async () => {
      const m = await fetchEvents(3, 'bad');
      return m.some((x) => x.startsWith('fetching template bad:latest failed')) ? m : undefined;
    });
    expect(ev.join('\n')).toContain(top);
  }, 120_000);

  it('creates of a template being fetched wait for the one fetch', async () => {
    await importOn(2, 'twice');
    const [a, b] = await Promise.all([c.create(0, { templateID: 'twice', nodeID: nodeID(3) }), c.create(0, { templateID: 'twice', nodeID: nodeID(3) })]);
    expect([a.status, b.status], `${a.body.message} ${b.body.message}`).toEqual([201, 201]);
    for (const s of [a, b]) await c.api(0, `/admin/v1/sandboxes/${s.body.sandboxID}`, { method: 'DELETE' });
    const ev = await until('the fetch done', async () => {
      const m = await fetchEvents(3, 'twice');
      return m.some((x) => x.startsWith('template twice:latest ready')) ? m : undefined;
    });
    expect(ev.filter((m) => m.startsWith('fetching template twice:latest for a create'))).toHaveLength(1);
  }, 120_000);

  it('a node whose store cannot hold the missing layers fails the create with 130598 naming the sizes, and fetches nothing', async () => {
    const rec = await importOn(1, 'huge');
    // A sparse 1 TiB file in the holder's copy: the size the holder reports is what an unpack would write.
    const file = c.computes[0]!.seen(join(layerDir(dirs[1]!, rec.layers[1]!), 'opt', 'huge-file'));
    await writeFile(file, '');
    await truncate(file, 1024 ** 4);
    const before = (await readdir(c.computes[2]!.seen(join(layersRoot(dirs[3]!), 'sha256')))).sort();
    const r = await c.create(0, { templateID: 'huge', nodeID: nodeID(3) });
    expect(r.status, r.body.message).toBe(503);
    expect(r.body).toMatchObject({
      code: 130598,
      message: expect.stringMatching(
        new RegExp(
          `node ${nodeID(3)}: the layer store \\S+ has [\\d.]+ MiB free; template huge:latest needs 10485\\d\\d\\.\\d MiB for its \\d missing layer\\(s\\).*nothing was fetched`,
        ),
      ),
    });
    expect((await readdir(c.computes[2]!.seen(join(layersRoot(dirs[3]!), 'sha256')))).sort()).toEqual(before);
    expect(await readdir(c.computes[2]!.seen(join(layersRoot(dirs[3]!), 'tmp')))).toEqual([]);
    expect((await view(3)).templates).not.toContain('huge');
  }, 120_000);
});
