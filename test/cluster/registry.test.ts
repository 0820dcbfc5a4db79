// A registry image in a cluster: the e2b SDK's Template().fromImage(registry image) through a
// control replica; the build runs on one compute node (in its test host), which pulls from a real
// registry (Debian's docker-registry, listening on the root side of test host 1, listed as insecure
// in the nodes' cubelet.toml); a sandbox on the other node runs from the template, its layers
// fetched from the node that pulled them, not from the registry (no pull-through cache is needed
// for that: the registry sees the image's blobs fetched once). A control replica refuses a
// `cubectl template import docker://` with a message naming the way.
import { Sandbox, Template } from 'e2b';
import { writeFile, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { NodeView } from '../../src/api/types.js';
import { startCluster, until, type TestCluster } from '../helpers/cluster.js';
import { busyboxLayer, ociArchive, tarOf } from '../helpers/images.js';
import { startRegistry, type TestRegistry } from '../helpers/registry.js';

let c: TestCluster | undefined;
let reg: TestRegistry | undefined;
let dir: string;
/** The root side of test host 1 (where the control replicas listen): every test host reaches it through its default route. */
let rootIP: string;
const opts = () => ({ apiKey: c!.apiKey, apiUrl: c!.controls[0]!.url, sandboxUrl: c!.controls[0]!.url });

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'cubed-test-cregistry-'));
  c = await startCluster({ computes: 2, controls: 1, cubelet: (rootHost) => ({ registry: { insecure: [rootHost] } }) });
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
}, 300_000);

afterAll(async () => {
  try {
    await c?.stop();
  } finally {
    await reg?.stop();
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
    const created = await c!.create(0, { templateID: 'cregistry', nodeID: other.nodeID });
    expect(created.status, created.body.message).toBe(201);
    const s = await Sandbox.connect(created.body.sandboxID, opts());
    try {
      expect((await s.commands.run('/opt/app/hello; cat /home/user/built')).stdout).toBe('hello-from-cluster-registry\nbuilt\n');
    } finally {
      await s.kill();
    }
    // The second node took the layers from its peer: the registry served no more blobs.
    expect(blobs()).toBe(pulled);
  });

  it('a control replica does not pull itself, and says where pulls run', async () => {
    const r = await c!.api<{ message: string }>(0, '/admin/v1/templates/pull', { method: 'POST', body: { image: `${reg!.host}/team/app:v1`, name: 'x' } });
    expect(r.status).toBe(400);
    expect(r.body.message).toMatch(/control replica pulls no images itself/);
  });
});
