// Images from registries, against a real registry on this machine (Debian's docker-registry,
// distribution v2, on loopback ports: test/helpers/registry.ts), one open and one behind
// htpasswd auth, both listed as insecure (plain HTTP) in the daemon's cubelet.toml. Images the
// test builds are pushed with skopeo, then pulled through cubectl (`template import docker://`)
// and the real e2b SDK (`Template().fromImage(image, {username, password})`, `fromDockerfile`
// with a registry FROM), and sandboxes run commands from them. A digest pulled once is not
// copied again (the registry's access log says so). Failures: unknown tag, wrong and missing
// credentials, a registry down, a registry not listed as insecure: each its code, never a 500.
// The registry passwords appear in no record, build status or log of the daemon, and no pull leaves
// its scratch dir behind.
import { readdir, readFile, mkdtemp, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execa } from 'execa';
import { Template } from 'e2b';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cubectl } from '../cli/run-cli.js';
import { freePort, startDaemon, type TestDaemon } from '../helpers/daemon.js';
import { busyboxLayer, ociArchive, tarOf } from '../helpers/images.js';
import { startRegistry, type TestRegistry } from '../helpers/registry.js';
import { sdkClient, type SdkClient } from '../helpers/sdk.js';
import { layersRoot } from '../../src/templates/store.js';

const PASSWORD = 'cube-registry-secret-7f3a';
const BAD_PASSWORD = 'cube-wrong-password-91c2';

let d: TestDaemon | undefined;
let sdk: SdkClient;
let open: TestRegistry | undefined;
let locked: TestRegistry | undefined;
let dir: string;
let env: Record<string, string>;

/** An image whose /opt/app/hello prints `greeting`. */
async function appImage(greeting: string): Promise<Buffer> {
  const app = await tarOf([
    { name: 'opt/', type: 'directory' },
    { name: 'opt/app/', type: 'directory' },
    { name: 'opt/app/hello', content: `#!/bin/sh\necho ${greeting}\n`, mode: 0o755 },
  ]);
  return ociArchive([await tarOf(busyboxLayer()), app], { Env: ['PATH=/bin:/usr/bin', `GREETING=${greeting}`], WorkingDir: '/opt/app' });
}

/** GETs of blobs in a registry's access log. */
const blobGets = (r: TestRegistry) =>
  r
    .log()
    .split('\n')
    .filter((l) => /"GET \/v2\/[^ ]+\/blobs\/sha256:/.test(l)).length;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'cubed-test-registry-images-'));
  open = await startRegistry();
  locked = await startRegistry({ auth: { username: 'ci', password: PASSWORD } });
  await writeFile(join(dir, 'open.tar'), await appImage('hello-from-open'));
  await writeFile(join(dir, 'locked.tar'), await appImage('hello-from-locked'));
  await open.push(join(dir, 'open.tar'), 'team/app:v1');
  await locked.push(join(dir, 'locked.tar'), 'private/app:v1');
  d = await startDaemon({ cubelet: { registry: { insecure: [open.host, locked.host] } } });
  sdk = sdkClient(d);
  env = sdk.env;
}, 120_000);

afterAll(async () => {
  try {
    await sdk?.killAll();
  } finally {
    try {
      await d?.stop();
    } finally {
      await open?.stop();
      await locked?.stop();
      await rm(dir, { recursive: true, force: true });
    }
  }
}, 120_000);

describe('cubectl template import docker://', () => {
  it('pulls by digest into the layer store, records the digest; a sandbox runs a command of the image', async () => {
    const want = (await execa('skopeo', ['inspect', '--tls-verify=false', '--format', '{{.Digest}}', `docker://${open!.host}/team/app:v1`])).stdout.trim();
    const r = await cubectl(['template', 'import', `docker://${open!.host}/team/app:v1`], env);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toMatch(new RegExp(`^imported app:v1 sha256:[0-9a-f]{64} from ${open!.host}/team/app:v1@${want} \\(3 layers\\)\\n$`));
    expect(r.stderr).toMatch(/Copying blob sha256:/);
    const rec = JSON.parse((await cubectl(['--json', 'template', 'inspect', 'app:v1'], env)).stdout) as {
      source: string;
      registry: { image: string; digest: string };
      config: { workdir: string; env: Record<string, string> };
    };
    expect(rec).toMatchObject({
      source: 'registry',
      registry: { image: `${open!.host}/team/app:v1`, digest: want },
      config: { workdir: '/opt/app', env: { GREETING: 'hello-from-open' } },
    });
    const sbx = await sdk.create('app:v1');
    const out = await sbx.commands.run('/opt/app/hello; pwd; echo $GREETING');
    expect(out).toMatchObject({ exitCode: 0, stdout: 'hello-from-open\n/opt/app\nhello-from-open\n' });
    await sbx.kill();
  });

  it('does not copy a digest again that is in the layer store (no blob fetched from the registry)', async () => {
    const before = blobGets(open!);
    expect(before).toBeGreaterThan(0);
    const r = await cubectl(['--json', 'template', 'import', `docker://${open!.host}/team/app:v1`, '--name', 'app-again'], env);
    expect(r.code, r.stderr).toBe(0);
    const rec = JSON.parse(r.stdout) as { pulled: boolean; ref: string; layers: string[] };
    expect(rec).toMatchObject({ pulled: false, ref: 'app-again:latest' });
    expect(blobGets(open!)).toBe(before);
    const first = JSON.parse((await cubectl(['--json', 'template', 'inspect', 'app:v1'], env)).stdout) as { layers: string[] };
    expect(rec.layers).toEqual(first.layers);
  });

  it('takes credentials from the environment; wrong or missing ones are 403 (130427), never logged', async () => {
    const image = `docker://${locked!.host}/private/app:v1`;
    const none = await cubectl(['template', 'import', image, '--name', 'nocreds'], env);
    expect(none.code).toBe(1);
    expect(none.stderr).toMatch(/130427 registry .* refused access .*unauthorized: authentication required/);
    const bad = await cubectl(['template', 'import', image, '--name', 'badcreds'], {
      ...env,
      CUBE_REGISTRY_USERNAME: 'ci',
      CUBE_REGISTRY_PASSWORD: BAD_PASSWORD,
    });
    expect(bad.code).toBe(1);
    expect(bad.stderr).toMatch(/130427/);
    expect(bad.stderr).not.toContain(BAD_PASSWORD);
    const ok = await cubectl(['template', 'import', image, '--name', 'private:v1'], { ...env, CUBE_REGISTRY_USERNAME: 'ci', CUBE_REGISTRY_PASSWORD: PASSWORD });
    expect(ok.code, ok.stderr).toBe(0);
    // --password-stdin, as `docker login` takes it: no password in the process list.
    const stdin = await execa(
      process.execPath,
      [join(import.meta.dirname, '../../bin/cubectl'), 'template', 'import', image, '--name', 'private:stdin', '--username', 'ci', '--password-stdin'],
      { input: `${PASSWORD}\n`, env, reject: false },
    );
    expect(stdin.exitCode, stdin.stderr).toBe(0);
    expect(stdin.stdout).toMatch(/^imported private:stdin .*nothing pulled: in the layer store already/);
    const sbx = await sdk.create('private:v1');
    expect((await sbx.commands.run('/opt/app/hello')).stdout).toBe('hello-from-locked\n');
    await sbx.kill();
  });

  it('answers an unknown tag 404 (130426), a registry down or not listed as insecure 503 (130428), with what the registry said', async () => {
    const unknown = await cubectl(['template', 'import', `docker://${open!.host}/team/app:nope`], env);
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toMatch(/130426 image .*team\/app:nope not found in registry .*manifest unknown/);
    const nobody = await cubectl(['template', 'import', `docker://${open!.host}/team/nothing:v1`], env);
    expect(nobody.stderr).toMatch(/130426 .*not found/);
    const port = await freePort();
    const down = await cubectl(['template', 'import', `docker://127.0.0.1:${port}/team/app:v1`], env);
    expect(down.code).toBe(1);
    expect(down.stderr).toMatch(/130428 registry 127\.0\.0\.1:\d+ unreachable .*connection refused; try again later/);
    // The same registry by another name is not on the insecure list: verified HTTPS, which it does not speak.
    const tls = await cubectl(['template', 'import', `docker://localhost:${open!.port}/team/app:v1`], env);
    expect(tls.stderr).toMatch(/130428 .*server gave HTTP response to HTTPS client.*\[registry\] insecure/);
    const res = await fetch(`${d!.url}/admin/v1/templates/pull`, {
      method: 'POST',
      headers: { 'x-api-key': d!.apiKey, 'content-type': 'application/json' },
      body: JSON.stringify({ image: `127.0.0.1:${port}/x:y`, name: 'x' }),
    });
    expect(res.status).toBe(503);
    expect(res.headers.get('retry-after')).toBe('30');
    expect(((await res.json()) as { code: number }).code).toBe(130428);
  });
});

describe('e2b SDK: Template().fromImage and fromDockerfile from a registry', () => {
  it('builds fromImage(image, {username, password}) with steps; a sandbox runs the image and the step', async () => {
    const lines: string[] = [];
    const t = Template()
      .fromImage(`${locked!.host}/private/app:v1`, { username: 'ci', password: PASSWORD })
      .runCmd('echo built-on-registry-image > /home/user/built.txt');
    const info = await Template.build(t, 'from-registry', { ...sdk.opts, onBuildLogs: (e: { message: string }) => lines.push(e.message) });
    expect(info).toMatchObject({ templateId: 'from-registry' });
    // private/app:v1 was pulled by cubectl above: the build finds its digest in the store.
    expect(lines.join('\n')).toMatch(/in the layer store already/);
    const sbx = await sdk.create('from-registry');
    const r = await sbx.commands.run('/opt/app/hello; cat /home/user/built.txt');
    expect(r).toMatchObject({ exitCode: 0, stdout: 'hello-from-locked\nbuilt-on-registry-image\n' });
    await sbx.kill();
    const rec = JSON.parse((await cubectl(['--json', 'template', 'inspect', 'from-registry'], env)).stdout) as { registry?: { digest: string } };
    expect(rec.registry?.digest).toMatch(/^sha256:/);
  });

  it('pulls during the build (progress in the build log) and builds fromDockerfile with a registry FROM', async () => {
    await writeFile(join(dir, 'other.tar'), await appImage('hello-from-other'));
    await open!.push(join(dir, 'other.tar'), 'team/other:v2'); // new to the daemon: a real pull
    const lines: string[] = [];
    const t = Template().fromDockerfile(`FROM ${open!.host}/team/other:v2\nRUN echo from-dockerfile > /df.txt\n`);
    await Template.build(t, 'from-dockerfile', { ...sdk.opts, onBuildLogs: (e: { message: string }) => lines.push(e.message) });
    const log = lines.join('\n');
    expect(log).toMatch(/Pulling .*team\/other:v2 \(sha256:[0-9a-f]{64}\) with skopeo/);
    expect(log).toMatch(/Copying blob sha256:/);
    const sbx = await sdk.create('from-dockerfile');
    const r = await sbx.commands.run('cat /df.txt; /opt/app/hello; pwd');
    expect(r).toMatchObject({ exitCode: 0, stdout: 'from-dockerfile\nhello-from-other\n/home/user\n' });
    await sbx.kill();
  });

  it("fails a build with the registry's answer: unknown tag, wrong credentials, registry down", async () => {
    const unknown = Template().fromImage(`${open!.host}/team/app:missing`).runCmd('true');
    await expect(Template.build(unknown, 'x-unknown', sdk.opts)).rejects.toThrow(/130426 image .*team\/app:missing not found.*manifest unknown/);
    const wrong = Template().fromImage(`${locked!.host}/private/app:v1`, { username: 'ci', password: BAD_PASSWORD }).runCmd('true');
    await expect(Template.build(wrong, 'x-wrong', sdk.opts)).rejects.toThrow(/130427 registry .* refused access/);
    const port = await freePort();
    const down = Template().fromImage(`127.0.0.1:${port}/team/app:v1`).runCmd('true');
    await expect(Template.build(down, 'x-down', sdk.opts)).rejects.toThrow(/130428 registry 127\.0\.0\.1:\d+ unreachable/);
  });

  it('keeps the registry passwords out of every record, build status and log of the daemon', async () => {
    const hits: string[] = [];
    const walk = async (p: string): Promise<void> => {
      for (const e of await readdir(p, { withFileTypes: true })) {
        const abs = join(p, e.name);
        if (e.isDirectory()) {
          if (abs === join(d!.dataDir, 'store') || abs === join(layersRoot(d!.dataDir), 'sha256') || abs === join(d!.dataDir, 'sandboxes')) continue;
          await walk(abs);
        } else if (e.isFile() && (await stat(abs)).size < 64 << 20) {
          const text = await readFile(abs, 'latin1');
          if (text.includes(PASSWORD) || text.includes(BAD_PASSWORD) || text.includes(Buffer.from(`ci:${PASSWORD}`).toString('base64'))) hits.push(abs);
        }
      }
    };
    await walk(join(d!.dataDir, '..')); // data and config dirs, daemon.log
    expect(hits).toEqual([]);
    // Every pull's scratch dir (its auth file and archive) is gone, failed pulls' too.
    expect((await readdir(join(layersRoot(d!.dataDir), 'tmp')).catch(() => [] as string[])).filter((n) => n.startsWith('pull-'))).toEqual([]);
  });
});
