// A registry image in a cluster: the e2b SDK's Template().fromImage(registry image) through a
// control replica; the build runs on one compute node (in its test host), which pulls from a real
// registry (Debian's docker-registry, listening on the root side of test host 1, listed as insecure
// in the nodes' cubelet.toml); a sandbox on the other node runs from the template, its layers
// fetched from the node that pulled them, not from the registry (no pull-through cache is needed
// for that: the registry sees the image's blobs fetched once). A control replica refuses a
// `cubectl template import docker://` with a message naming the way.
// The pull-through cache: a second registry (with credentials) behind the same cluster; a build
// on the other node takes the image's layers from the node that pulled it (the registry's access
// log counts the blob GETs: each blob once), two builds of a new digest on the two nodes at once
// pull it once, and a caller whose credentials the registry refuses gets 403 (130427) at the
// build start although a peer holds the image (by tag and by digest alike).
import { Sandbox, Template } from 'e2b';
import { existsSync } from 'node:fs';
import { readFile, writeFile, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { NodeView } from '../../src/api/types.js';
import { startCluster, until, type TestCluster } from '../helpers/cluster.js';
import { busyboxLayer, ociArchive, tarOf } from '../helpers/images.js';
import { startRegistry, type TestRegistry } from '../helpers/registry.js';
import { layersRoot } from '../../src/templates/store.js';

let c: TestCluster | undefined;
let reg: TestRegistry | undefined;
/** The registry with credentials the pull-through tests use. */
let priv: TestRegistry | undefined;
const CREDS = { username: 'puller', password: 'pull-secret' };
let dir: string;
/** The root side of test host 1 (where the control replicas listen): every test host reaches it through its default route. */
let rootIP: string;
const opts = () => ({ apiKey: c!.apiKey, apiUrl: c!.controls[0]!.url, sandboxUrl: c!.controls[0]!.url });

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'cubed-test-cregistry-'));
  c = await startCluster({
    computes: 2,
    controls: 1,
    dataDirs: { 1: join(dir, 'data-1'), 2: join(dir, 'data-2') },
    cubelet: (rootHost) => ({ registry: { insecure: [rootHost] } }),
  });
  rootIP = new URL(c.controls[0]!.url).hostname;
  await until(
    'two healthy nodes that fetch templates',
    async () => ((await c!.nodes(0)).filter((n) => n.healthy && n.layers !== undefined).length === 2 ? true : undefined),
    60_000,
  );
  reg = await startRegistry({ address: rootIP });
  const app = await tarOf([
    { name: 'opt/', type: 'directory' },
    { name: 'opt/app/', type: 'directory' },
    { name: 'opt/app/hello', content: '#!/bin/sh\necho hello-from-cluster-registry\n', mode: 0o755 },
  ]);
  await writeFile(join(dir, 'img.tar'), await ociArchive([await tarOf(busyboxLayer()), app], { Env: ['PATH=/bin:/usr/bin'] }));
  await reg.push(join(dir, 'img.tar'), 'team/app:v1');
  priv = await startRegistry({ address: rootIP, auth: CREDS });
  // Two images sharing the base layer, each with a layer of its own.
  for (const tag of ['v1', 'v2', 'v3']) {
    const own = await tarOf([{ name: `shared-${tag}`, content: `${tag}\n${'x'.repeat(200_000)}\n` }]);
    await writeFile(join(dir, `${tag}.tar`), await ociArchive([await tarOf(busyboxLayer()), own], { Env: ['PATH=/bin:/usr/bin'] }));
    await priv.push(join(dir, `${tag}.tar`), `team/shared:${tag}`);
  }
}, 300_000);

/** The output of `cmd` in a sandbox of `template` on node `nodeID` (removed after). */
async function runOn(template: string, nodeID: string, cmd: string): Promise<string> {
  const created = await c!.create(0, { templateID: template, nodeID });
  expect(created.status, created.body.message).toBe(201);
  const s = await Sandbox.connect(created.body.sandboxID, opts());
  try {
    return (await s.commands.run(cmd)).stdout;
  } finally {
    await s.kill();
  }
}

afterAll(async () => {
  try {
    await c?.stop();
  } finally {
    await reg?.stop();
    await priv?.stop();
    await rm(dir, { recursive: true, force: true });
  }
}, 300_000);

describe('registry images in a cluster', () => {
  it('Template.build fromImage pulls on the build node; a sandbox on the other node runs from it with layers from its peer', async () => {
    const lines: string[] = [];
    const t = Template().fromImage(`${reg!.host}/team/app:v1`).runCmd('echo built > /home/user/built');
    await Template.build(t, 'cregistry', { ...opts(), onBuildLogs: (e) => lines.push(e.message) });
    expect(lines.join('\n')).toMatch(/Copying blob sha256:/);
    const blobs = () =>
      reg!
        .log()
        .split('\n')
        .filter((l) => /"GET \/v2\/team\/app\/blobs\/sha256:/.test(l)).length;
    const pulled = blobs();
    const views = await until('one node reports cregistry', async () => {
      const v = await c!.nodes(0);
      return v.some((n) => n.templates.includes('cregistry')) ? v : undefined;
    });
    const holder = views.find((n: NodeView) => n.templates.includes('cregistry'))!;
    const other = c!.computes.find((n) => n.nodeID !== holder.nodeID)!;
    expect(await runOn('cregistry', other.nodeID, '/opt/app/hello; cat /home/user/built')).toBe('hello-from-cluster-registry\nbuilt\n');
    // The second node took the layers from its peer: the registry served no more blobs.
    expect(blobs()).toBe(pulled);
  });

  it('a control replica does not pull itself, and says where pulls run', async () => {
    const r = await c!.api<{ message: string }>(0, '/admin/v1/templates/pull', { method: 'POST', body: { image: `${reg!.host}/team/app:v1`, name: 'x' } });
    expect(r.status).toBe(400);
    expect(r.body.message).toMatch(/control replica pulls no images itself/);
  });

  describe('the pull-through cache', () => {
    const e2b = async (method: string, path: string, body?: unknown) => {
      const r = await fetch(`${c!.controls[0]!.url}${path}`, {
        method,
        headers: { 'x-api-key': c!.apiKey, 'content-type': 'application/json' },
        ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
      });
      const text = await r.text();
      return { status: r.status, json: (text ? JSON.parse(text) : {}) as Record<string, unknown> & { message?: string; code?: number } };
    };
    /** The blob GETs the registry served, per blob path. */
    const blobGets = () => {
      const n = new Map<string, number>();
      for (const m of priv!.log().matchAll(/"GET (\/v2\/team\/shared\/blobs\/sha256:[0-9a-f]{64})/g)) n.set(m[1]!, (n.get(m[1]!) ?? 0) + 1);
      return n;
    };
    const node = (i: number) => c!.computes[i]!.nodeID;
    /** Runs `f` with every compute node but `i` cordoned, so a build placed meanwhile runs on node i. */
    const placedOn = async <T>(i: number, f: () => Promise<T>): Promise<T> => {
      const others = c!.computes.filter((_, j) => j !== i).map((n) => n.nodeID);
      try {
        for (const id of others) expect((await c!.api(0, `/admin/v1/nodes/${id}/cordon`, { body: {} })).status).toBe(200);
        return await f();
      } finally {
        for (const id of others) await c!.api(0, `/admin/v1/nodes/${id}/uncordon`, { body: {} });
      }
    };
    /** Template.build of `t` as `name` on node i: its log. */
    const buildOn = (i: number, t: Parameters<typeof Template.build>[0], name: string) =>
      placedOn(i, async () => {
        const lines: string[] = [];
        await Template.build(t, name, { ...opts(), onBuildLogs: (e) => lines.push(e.message) });
        return lines.join('\n');
      });
    /** POST /v3/templates: the build's ids (placed on a node then). */
    const request = async (name: string) => {
      const r = await e2b('POST', '/v3/templates', { name });
      expect(r.status, r.json.message).toBe(202);
      return { templateID: r.json.templateID as string, buildID: r.json.buildID as string };
    };
    const start = (b: { templateID: string; buildID: string }, fromImage: string, creds?: { username: string; password: string }) =>
      e2b('POST', `/v2/templates/${b.templateID}/builds/${b.buildID}`, {
        fromImage,
        ...(creds ? { fromImageRegistry: { type: 'registry', ...creds } } : {}),
        steps: [{ type: 'RUN', args: ['cat /shared-* > /home/user/seen'], force: false }],
      });
    const finished = (b: { templateID: string; buildID: string }) =>
      until(
        `build ${b.templateID} ends`,
        async () => {
          const st = await e2b('GET', `/templates/${b.templateID}/builds/${b.buildID}/status`);
          return st.json.status === 'ready' || st.json.status === 'error' ? st.json : undefined;
        },
        180_000,
      ) as Promise<{ status: string; logEntries: { message: string }[]; reason?: { message: string } }>;
    const logOf = (st: { logEntries: { message: string }[] }) => st.logEntries.map((l) => l.message).join('\n');

    it('a build on the other node takes the image from the node that pulled it: the registry serves each blob once', async () => {
      const image = `${priv!.host}/team/shared:v1`;
      const first = await buildOn(0, Template().fromImage(image, CREDS).runCmd('echo a > /home/user/a'), 'cpull-a');
      expect(first).toMatch(/Copying blob sha256:/);
      const pulled = blobGets();
      expect([...pulled.values()].every((n) => n === 1)).toBe(true);
      const second = await buildOn(1, Template().fromImage(image, CREDS).runCmd('echo b > /home/user/b'), 'cpull-b');
      expect(second).toContain(`node ${node(0)} holds it: fetching its layers from the cluster, not from the registry`);
      expect(second).toMatch(new RegExp(`layer \\d/\\d sha256:[0-9a-f]{12} from node ${node(0)}`));
      expect(second).not.toMatch(/Copying blob|with skopeo/);
      expect(blobGets()).toEqual(pulled);
      // The template built on node 1 runs there, from the fetched layers (once its heartbeat lists it).
      await until('node 1 reports cpull-b', async () =>
        (await c!.nodes(0)).some((n) => n.nodeID === node(1) && n.templates.includes('cpull-b')) ? true : undefined,
      );
      expect(await runOn('cpull-b', node(1), 'head -1 /shared-v1; cat /home/user/b')).toBe('v1\nb\n');
    });

    it('credentials the registry refuses are refused at the build start although a peer holds the image (tag and digest)', async () => {
      const digest = await until('the digest of cpull-a', async () => {
        const r = await c!.api<{ registry?: { digest: string } }>(0, '/admin/v1/templates/cpull-a');
        return r.body.registry?.digest;
      });
      await placedOn(1, async () => {
        for (const [from, creds] of [
          [`${priv!.host}/team/shared:v1`, { ...CREDS, password: 'wrong' }],
          [`${priv!.host}/team/shared@${digest}`, undefined],
          [`${priv!.host}/team/shared@${digest}`, { ...CREDS, password: 'wrong' }],
        ] as const) {
          const r = await start(await request('cpull-denied'), from, creds);
          expect(r.status, `${from} ${creds ? 'wrong credentials' : 'no credentials'}: ${r.json.message}`).toBe(403);
          expect(r.json.message).toMatch(/^130427 registry .* refused access/);
        }
      });
    });

    it('two builds of a new digest on the two nodes at once pull it from the registry once', async () => {
      const image = `${priv!.host}/team/shared:v2`;
      const before = blobGets();
      const a = await placedOn(0, () => request('cpull-c0'));
      const b = await placedOn(1, () => request('cpull-c1'));
      const started = await Promise.all([start(a, image, CREDS), start(b, image, CREDS)]);
      for (const r of started) expect(r.status, r.json.message).toBe(202);
      const [sa, sb] = await Promise.all([finished(a), finished(b)]);
      expect([sa.status, sb.status], `${sa.reason?.message} / ${sb.reason?.message}`).toEqual(['ready', 'ready']);
      const logs = [logOf(sa), logOf(sb)];
      // One pulled from the registry, the other fetched from it.
      expect(logs.filter((l) => /Copying blob sha256:/.test(l)).length).toBe(1);
      expect(logs.filter((l) => /fetching its layers from the cluster, not from the registry/.test(l)).length).toBe(1);
      const after = blobGets();
      const added = [...after.keys()].filter((k) => !before.has(k));
      expect(added.length).toBeGreaterThan(0);
      expect([...after.entries()].filter(([k, n]) => n !== 1 && added.includes(k))).toEqual([]);
    });

    it('a copy from the peer that fails (a layer that does not verify) falls back to the registry, and the build succeeds', async () => {
      const image = `${priv!.host}/team/shared:v3`;
      await buildOn(0, Template().fromImage(image, CREDS), 'cpull-d0');
      // Node 0's copy of the image's own layer, changed behind its back: what it serves no longer matches its tree digest.
      const data = join(dir, 'data-1');
      const held = JSON.parse(await readFile(c!.computes[0]!.seen(join(layersRoot(data), 'images.json')), 'utf8')) as Record<
        string,
        { image: string; layers: string[] }
      >;
      const layers = Object.values(held).find((e) => e.image.endsWith('team/shared:v3'))!.layers;
      const file = layers.map((l) => c!.computes[0]!.seen(join(layersRoot(data), 'sha256', l.slice(7), 'shared-v3'))).find((f) => existsSync(f))!;
      const was = await readFile(file);
      await writeFile(file, 'not what was pulled\n');
      try {
        const log = await buildOn(1, Template().fromImage(image, CREDS), 'cpull-d1');
        expect(log).toContain(`node ${node(0)} holds it: fetching its layers from the cluster`);
        expect(log).toMatch(new RegExp(`fetching sha256:[0-9a-f]{64} from node ${node(0)} failed \\(.*failed verification.*\\): pulling it from the registry`));
        expect(log).toMatch(/Copying blob sha256:/);
      } finally {
        await writeFile(file, was);
      }
    });
  });
});
