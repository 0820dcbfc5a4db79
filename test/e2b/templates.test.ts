// Templates from images against a real cubed: `cubectl template import` of a locally made
// docker-archive and OCI layout (two layers, a whiteout, an opaque dir), sandboxes from them
// through the real `e2b` SDK, hostile archives refused, rm refused while in use, and start/ready
// commands that succeed, fail and time out.
import { existsSync } from 'node:fs';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Sandbox, Template } from 'e2b';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cubectl } from '../cli/run-cli.js';
import { until } from '../helpers/cluster.js';
import { call, startDaemon, type TestDaemon } from '../helpers/daemon.js';
import { busyboxLayer, dockerArchive, ociLayoutDir, tarOf } from '../helpers/images.js';
import { sdkClient, type SdkClient } from '../helpers/sdk.js';
import { layersRoot } from '../../src/templates/store.js';

let d: TestDaemon;
let sdk: SdkClient;
let scratch: string;
let opts: SdkClient['opts'];
let env: Record<string, string>;
const create = (template: string) => sdk.create(template);

async function layers(): Promise<Buffer[]> {
  const base = await tarOf([
    ...busyboxLayer(),
    { name: 'etc/motd', content: 'hello\n' },
    { name: 'opt/', type: 'directory' },
    { name: 'opt/old', content: 'old\n' },
  ]);
  const top = await tarOf([
    { name: 'etc/.wh.motd' },
    { name: 'opt/', type: 'directory' },
    { name: 'opt/.wh..wh..opq' },
    { name: 'opt/new', content: 'new\n' },
    { name: 'app/', type: 'directory', uid: 1000, gid: 1000 },
  ]);
  return [base, top];
}

const CONFIG = { Env: ['GREETING=from-image', 'PATH=/bin:/usr/bin'], WorkingDir: '/app' };

beforeAll(async () => {
  // A short default ready limit: a create whose ready command never passes fails after it.
  d = await startDaemon({ master: { sandbox: { ready_timeout_sec: 3 } } });
  sdk = sdkClient(d);
  ({ opts, env } = sdk);
  scratch = await mkdtemp(join(tmpdir(), 'cubed-test-templates-'));
  const l = await layers();
  await writeFile(join(scratch, 'image.tar'), await dockerArchive(l, CONFIG));
  await ociLayoutDir(join(scratch, 'layout'), l, CONFIG, { gzip: true });
  await writeFile(join(scratch, 'base.tar'), await dockerArchive([await tarOf(busyboxLayer())], {}));
});

afterAll(async () => {
  try {
    await sdk?.killAll();
  } finally {
    await d?.stop();
    await rm(scratch, { recursive: true, force: true });
  }
});

describe('templates from images', () => {
  it('imports a docker-archive and an OCI layout with cubectl and runs e2b sandboxes from them', async () => {
    const a = await cubectl(['template', 'import', join(scratch, 'image.tar'), '--name', 'img'], env);
    expect(a.stderr).toBe('');
    expect(a).toMatchObject({ code: 0, stdout: expect.stringMatching(/^imported img:latest sha256:[0-9a-f]{64} \(3 layers, docker-archive\)\n$/) });
    const b = await cubectl(['template', 'import', join(scratch, 'layout'), '--name', 'img:oci', '--json'], env);
    expect(b.code).toBe(0);
    expect(JSON.parse(b.stdout)).toMatchObject({ ref: 'img:oci', source: 'oci', config: { workdir: '/app', env: { GREETING: 'from-image' } } });
    const ls = JSON.parse((await cubectl(['template', 'ls', '--json'], env)).stdout) as { templateID: string; record?: { layers: string[] } }[];
    expect(ls.map((t) => t.templateID).sort()).toEqual(['host', 'img', 'img:oci']);
    expect(ls.find((t) => t.templateID === 'img')!.record!.layers).toEqual(ls.find((t) => t.templateID === 'img:oci')!.record!.layers);

    for (const name of ['img', 'img:oci']) {
      const sbx = await create(name);
      const r = await sbx.commands.run('cat /opt/new; ls /opt; test -e /etc/motd || echo motd-gone; echo $GREETING; pwd; id -u');
      expect(r).toMatchObject({ exitCode: 0, stdout: 'new\nnew\nmotd-gone\nfrom-image\n/app\n1000\n' });
      const root = await sbx.commands.run('id -u; echo $HOME', { user: 'root' });
      expect(root.stdout).toBe('0\n/root\n');
      await sbx.kill();
    }
  });

  it("shows a client's own import and rm in its very next list (read-your-writes)", async () => {
    // The list came from the registry the node's heartbeat writes, up to a second later: the full
    // suite saw a list without the template just imported. Several rounds, each read at once.
    const body = await readFile(join(scratch, 'base.tar'));
    const names = async () => ((await call(d, 'GET', '/admin/v1/templates')).json as { templateID: string }[]).map((t) => t.templateID);
    for (let i = 0; i < 3; i++) {
      const imported = await fetch(`${d.url}/admin/v1/templates/import?name=ryw${i}`, {
        method: 'POST',
        headers: { 'x-api-key': d.apiKey, 'content-type': 'application/x-tar' },
        body,
      });
      expect(imported.status, await imported.clone().text()).toBe(201);
      expect(await names()).toContain(`ryw${i}`);
      expect((await call(d, 'DELETE', `/admin/v1/templates/ryw${i}`)).status).toBe(200);
      expect(await names()).not.toContain(`ryw${i}`);
    }
  });

  it('pulls through skopeo for image references (oci:DIR here: no registry is reachable)', async () => {
    const r = await cubectl(['template', 'import', `oci:${join(scratch, 'layout')}`, '--name', 'pulled'], env);
    expect(r.stderr).toBe('');
    expect(r).toMatchObject({ code: 0, stdout: expect.stringMatching(/^imported pulled:latest sha256:[0-9a-f]{64} \(3 layers, oci\)\n$/) });
    const missing = await cubectl(['template', 'import', `docker-archive:${join(scratch, 'nope.tar')}`, '--name', 'nope'], env);
    expect(missing.code).toBe(2);
    expect(missing.stderr).toMatch(/skopeo copy docker-archive:.*nope\.tar/);
    expect((await cubectl(['template', 'rm', 'pulled'], env)).code).toBe(0);
  });

  it('refuses hostile and broken archives with a code, registering nothing', async () => {
    const cases: [string, Buffer, RegExp][] = [
      ['escape.tar', await dockerArchive([await tarOf([{ name: '../../../tmp/cube-escaped', content: 'x' }])], {}), /130420 .*escapes the layer root/],
      [
        'link.tar',
        await dockerArchive(
          [
            await tarOf([
              { name: 'l', type: 'symlink', linkname: '/' },
              { name: 'l/tmp/cube-escaped', content: 'x' },
            ]),
          ],
          {},
        ),
        /130420 .*passes through the symlink 'l'/,
      ],
      [
        'digest.tar',
        await dockerArchive(await layers(), {}, { diffIDs: [`sha256:${'1'.repeat(64)}`, `sha256:${'2'.repeat(64)}`] }),
        /130421 .*layer 1 \(sha256:1{64}\)/,
      ],
      ['short.tar', (await dockerArchive(await layers(), {})).subarray(0, 700_000), /13042[01] /],
    ];
    for (const [file, data, message] of cases) {
      await writeFile(join(scratch, file), data);
      const r = await cubectl(['template', 'import', join(scratch, file), '--name', 'bad'], env);
      expect(r.code, file).toBe(2); // a 400: the input is at fault
      expect(r.stderr, file).toMatch(message);
    }
    const ls = JSON.parse((await cubectl(['template', 'ls', '--json'], env)).stdout) as { templateID: string }[];
    expect(ls.map((t) => t.templateID)).not.toContain('bad');
    await expect(Sandbox.create('bad', opts)).rejects.toThrow(/not found/);
  });

  it('removes a tag while a sandbox runs on it: the sandbox works on (files, exec, pause, resume, snapshot, a restart), its layers go when it ends', async () => {
    await writeFile(join(scratch, 'tagged.tar'), await dockerArchive([await tarOf([...busyboxLayer(), { name: 'opt/tagged', content: 'on the tag\n' }])], {}));
    expect((await cubectl(['template', 'import', join(scratch, 'tagged.tar'), '--name', 'tagged:v1'], env)).code).toBe(0);
    const layersOf = async (t: string) => (JSON.parse((await cubectl(['template', 'inspect', t, '--json'], env)).stdout) as { layers: string[] }).layers;
    const shared = await layersOf('img'); // busybox's files: a layer of img too
    const own = (await layersOf('tagged:v1')).filter((l) => !shared.includes(l));
    expect(own.length).toBeGreaterThan(0);
    const onDisk = (ls: string[]) => ls.filter((l) => existsSync(join(layersRoot(d.dataDir), 'sha256', l.slice('sha256:'.length))));
    const sbx = await create('tagged:v1');
    await Template.removeTags('tagged', 'v1', opts);
    // 404 naming it once the node's next heartbeat (1 s) has written its list to the registry; a 503 "retry" before.
    await until('a create on the removed tag to be a 404', async () => {
      const e = (await Sandbox.create('tagged:v1', opts).catch((x: unknown) => x)) as Error;
      return /130594/.test(e.message) ? undefined : e;
    }).then((e) => expect(e.message).toMatch(/^404: .*template tagged:v1 not found/));
    expect((await call(d, 'GET', '/templates/tagged')).status).toBe(404);
    expect(onDisk(own)).toEqual(own);
    expect((await sbx.commands.run('cat /opt/tagged')).stdout).toBe('on the tag\n');
    await sbx.files.write('/home/user/mine', 'kept');
    await sbx.pause();
    const resumed = await Sandbox.connect(sbx.sandboxId, opts);
    expect(await resumed.files.read('/home/user/mine')).toBe('kept');
    const snap = await resumed.createSnapshot();
    expect(await Sandbox.deleteSnapshot(snap.snapshotId, opts)).toBe(true);
    // A restart takes it back, its layers still held.
    await d.restart();
    expect(onDisk(own)).toEqual(own);
    const back = await Sandbox.connect(sbx.sandboxId, opts);
    expect((await back.commands.run('cat /opt/tagged /home/user/mine')).stdout).toBe('on the tag\nkept');
    await back.kill();
    await until('the held layers to go', async () => (onDisk(own).length === 0 ? true : undefined));
    expect(onDisk(shared)).toEqual(shared);
    // rm of a template a sandbox runs on works the same way; img:oci shares every layer of img.
    const img = await create('img');
    expect(await cubectl(['template', 'rm', 'img'], env)).toMatchObject({ code: 0, stdout: 'removed img:latest\n' });
    expect((await cubectl(['template', 'inspect', 'img'], env)).stderr).toMatch(/130404/);
    expect((await img.commands.run('cat /opt/new')).stdout).toBe('new\n');
    await img.kill();
    const again = await create('img:oci');
    expect((await again.commands.run('cat /opt/new')).stdout).toBe('new\n');
    await again.kill();
  });
});

describe('start and ready commands', () => {
  const importWith = async (name: string, ...flags: string[]) => {
    const r = await cubectl(['template', 'import', join(scratch, 'base.tar'), '--name', name, ...flags], env);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
  };

  it('runs the start command in the background and is running only once the ready command passes', async () => {
    await importWith(
      'svc',
      '--start-cmd',
      'echo starting; sleep 1; id -u > /tmp/started-as; pwd >> /tmp/started-as; echo $MARK >> /tmp/started-as; exec sleep 1000',
      '--ready-cmd',
      'test -s /tmp/started-as',
      '--workdir',
      '/home/user',
      '--user',
      'user',
    );
    const sbx = await sdk.create('svc', { envs: { MARK: 'create-env' } });
    expect((await sbx.commands.run('cat /tmp/started-as')).stdout).toBe('1000\n/home/user\ncreate-env\n');
    const procs = await sbx.commands.list();
    expect(procs.find((p) => p.tag === 'start')).toMatchObject({ cmd: '/bin/sh' });
    await sbx.kill();
  });

  it('fails the create with the output tail when the start command fails, and leaves nothing', async () => {
    await importWith('svc-bad', '--start-cmd', 'echo boom-output >&2; exit 7', '--ready-cmd', 'false');
    await expect(Sandbox.create('svc-bad', opts)).rejects.toThrow(/130422 .*start command exited 7.*boom-output/);
    await importWith('svc-slow', '--start-cmd', 'echo waiting-forever; exec sleep 1000', '--ready-cmd', 'false', '--ready-timeout', '1');
    await expect(Sandbox.create('svc-slow', opts)).rejects.toThrow(/130422 .*did not exit 0 within 1 s.*waiting-forever/);
    // Without a limit of its own: sandbox.ready_timeout_sec (3 s here), with the ready command's last output.
    await importWith('svc-never', '--start-cmd', 'exec sleep 1000', '--ready-cmd', 'echo not-listening-yet; false');
    await expect(Sandbox.create('svc-never', opts)).rejects.toThrow(
      /130422 the ready command .* did not exit 0 within 3 s \(tried \d+ times\); ready command's last output \(exit 1\): "not-listening-yet\\n"/,
    );
    const left = await fetch(`${d.url}/admin/v1/sandboxes`, { headers: { 'x-api-key': d.apiKey } }).then((r) => r.json() as Promise<{ templateID: string }[]>);
    expect(left.filter((s) => s.templateID.startsWith('svc-'))).toEqual([]);
  });
});
