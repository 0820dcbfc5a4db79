// Template builds through the real `e2b` SDK, unchanged: Template() + Template.build() against a
// real cubed (steps in ns sandboxes, layers captured into the store), then sandboxes from the
// alias; the cache, force, a failing step, bad input; tags and the E2B template list/get/delete.
import { access, mkdir, mkdtemp, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { gzipSync } from 'node:zlib';
import { join } from 'node:path';
import { execa } from 'execa';
import { Sandbox, Template } from 'e2b';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FilesHash, S_IFREG } from '../../src/templates/build/files-hash.js';
import { copyFiles, filesHash } from '../../src/templates/recipe.js';
import { cubectl } from '../cli/run-cli.js';
import { startDaemon, type TestDaemon } from '../helpers/daemon.js';
import { busyboxLayer, dockerArchive, longNameHeader, tarOf } from '../helpers/images.js';
import { sdkClient, type SdkClient } from '../helpers/sdk.js';

let d: TestDaemon;
let sdk: SdkClient;
let ctxDir: string;
let opts: SdkClient['opts'];
let env: Record<string, string>;
const create = (template: string) => sdk.create(template);

const call = async (method: string, path: string, body?: unknown) => {
  const r = await fetch(`${d.url}${path}`, {
    method,
    headers: { 'x-api-key': d.apiKey, 'content-type': 'application/json' },
    ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
  });
  const text = await r.text();
  return { status: r.status, json: text ? (JSON.parse(text) as Record<string, unknown>) : undefined };
};

/** Build logs as the SDK hands them to onBuildLogs. */
function collect(): { lines: string[]; onBuildLogs: (e: { message: string }) => void } {
  const lines: string[] = [];
  return { lines, onBuildLogs: (e) => lines.push(e.message) };
}

beforeAll(async () => {
  // A short ready limit: the build whose ready command never passes fails after it.
  d = await startDaemon({ master: { sandbox: { ready_timeout_sec: 2 } } });
  sdk = sdkClient(d);
  ({ opts, env } = sdk);
  ctxDir = await mkdtemp(join(tmpdir(), 'cubed-test-build-'));
  await mkdir(join(ctxDir, 'app'));
  await writeFile(join(ctxDir, 'app', 'hello.txt'), 'hello from the build context\n');
  await writeFile(join(ctxDir, 'app', 'run.sh'), '#!/bin/sh\necho ran-$GREETING\n', { mode: 0o755 });
  await writeFile(join(ctxDir, 'image.tar'), await dockerArchive([await tarOf(busyboxLayer())], { Env: ['PATH=/bin:/usr/bin'] }));
  const r = await cubectl(['template', 'import', join(ctxDir, 'image.tar'), '--name', 'busybox'], env);
  expect(r.stderr).toBe('');
});

afterAll(async () => {
  try {
    await sdk?.killAll();
  } finally {
    await d?.stop();
    await rm(ctxDir, { recursive: true, force: true });
  }
});

const recipe = (marker: string) =>
  Template({ fileContextPath: ctxDir })
    .fromImage('busybox')
    .setEnvs({ GREETING: 'hi' })
    .runCmd(`mkdir -p /home/user/out && echo ${marker} > /home/user/out/marker && echo step-output-$GREETING`)
    .copy('app', '/opt/app/')
    .setWorkdir('/opt/app');

describe('Template.build with the e2b SDK', () => {
  it('builds fromImage + setEnvs + runCmd + copy + setWorkdir; a sandbox from the alias sees files and env', async () => {
    const log = collect();
    const info = await Template.build(recipe('one'), 'built', { ...opts, onBuildLogs: log.onBuildLogs });
    expect(info).toMatchObject({ templateId: 'built', name: 'built' });
    expect(log.lines.join('\n')).toMatch(/step-output-hi/);
    expect(log.lines.join('\n')).toMatch(/Uploaded 'app'/);
    const sbx = await create('built');
    const r = await sbx.commands.run(
      'cat /home/user/out/marker /opt/app/hello.txt; echo $GREETING; pwd; ./run.sh; stat -c %U /home/user/out/marker /opt/app/hello.txt',
    );
    expect(r).toMatchObject({ exitCode: 0, stdout: 'one\nhello from the build context\nhi\n/opt/app\nran-hi\nroot\nroot\n' });
    // The runtime's /etc/hosts of the build sandbox is not part of the template.
    expect((await sbx.commands.run('cat /etc/hosts')).stdout).toContain(sbx.sandboxId);
    await sbx.kill();
    // Sandbox.create('built:latest') is the same template.
    const again = await create('built:latest');
    expect((await again.commands.run('cat /home/user/out/marker')).stdout).toBe('one\n');
    await again.kill();
  });

  it('takes every step from the cache on a rebuild, and runs them again with skipCache (force)', async () => {
    const before = JSON.parse((await cubectl(['template', 'inspect', 'built', '--json'], env)).stdout) as { layers: string[] };
    const cached = collect();
    await Template.build(recipe('one'), 'built', { ...opts, onBuildLogs: cached.onBuildLogs });
    expect(cached.lines.filter((l) => /CACHED/.test(l))).toHaveLength(3);
    expect(cached.lines.join('\n')).not.toMatch(/step-output/);
    expect(cached.lines.join('\n')).toMatch(/Skipping upload of 'app', already cached/);
    const after = JSON.parse((await cubectl(['template', 'inspect', 'built', '--json'], env)).stdout) as { layers: string[] };
    expect(after.layers).toEqual(before.layers);

    const forced = collect();
    await Template.build(recipe('one'), 'built', { ...opts, skipCache: true, onBuildLogs: forced.onBuildLogs });
    expect(forced.lines.filter((l) => /CACHED/.test(l))).toHaveLength(0);
    expect(forced.lines.join('\n')).toMatch(/step-output-hi/);
    // A changed step runs from there on; the steps before it stay cached.
    const changed = collect();
    await Template.build(recipe('two'), 'built:v2', { ...opts, onBuildLogs: changed.onBuildLogs });
    expect(changed.lines.join('\n')).toMatch(/step-output-hi/);
    const sbx = await create('built:v2');
    expect((await sbx.commands.run('cat /home/user/out/marker')).stdout).toBe('two\n');
    await sbx.kill();
  });

  it('builds from another template (fromTemplate) and with a start and ready command', async () => {
    // 'built' runs its steps as root (busybox has no User); setUser switches the later steps and the start command.
    const t = Template()
      .fromTemplate('built')
      .runCmd('echo derived > /home/user/derived')
      .setUser('user')
      .runCmd('id -u > /home/user/who')
      .setStartCmd('id -u > /tmp/started; exec sleep 1000', 'test -s /tmp/started');
    await Template.build(t, 'derived', opts);
    const sbx = await create('derived');
    const r = await sbx.commands.run('cat /home/user/derived /home/user/out/marker /home/user/who /tmp/started');
    expect(r.stdout).toBe('derived\none\n1000\n1000\n');
    await sbx.kill();
    // The parent cannot go while a template built from it exists.
    expect((await call('DELETE', '/templates/built')).status).toBe(409);
  });

  it('fails a build on a failing step with its exit code and output, registering nothing', async () => {
    const t = Template({ fileContextPath: ctxDir }).fromImage('busybox').runCmd('echo about-to-fail; echo bad-thing >&2; exit 3');
    const err = await Template.build(t, 'broken', opts).then(
      () => undefined,
      (e: unknown) => e as Error,
    );
    expect(err?.name).toBe('BuildError');
    expect(err?.message).toMatch(/step 1 \(RUN echo about-to-fail.*\) exited 3.*bad-thing/);
    expect((await call('GET', '/templates/aliases/broken')).status).toBe(404);
    await expect(Sandbox.create('broken', opts)).rejects.toThrow(/not found/);
    // Its cause stays in the status (as the SDK polls it).
    const builds = (await call('GET', '/templates')).json as unknown as { templateID: string }[];
    expect(builds.map((b) => b.templateID)).not.toContain('broken');
  });

  it('fails a build whose ready command never passes, naming it, its limit and both outputs, registering nothing', async () => {
    const t = Template().fromTemplate('busybox').setStartCmd('echo start-said-this; exec sleep 1000', 'echo ready-said-this >&2; false');
    const { lines, onBuildLogs } = collect();
    const err = await Template.build(t, 'never-ready', { ...opts, onBuildLogs }).then(
      () => undefined,
      (e: unknown) => e as Error,
    );
    expect(err?.name).toBe('BuildError');
    expect(err?.message).toMatch(
      /the ready command 'echo ready-said-this >&2; false' did not exit 0 within 2 s \(tried \d+ times\); ready command's last output \(exit 1\): "ready-said-this\\n"; start command output .*start-said-this/,
    );
    expect(lines.some((l) => l.includes("waiting up to 2 s for 'echo ready-said-this >&2; false'"))).toBe(true);
    const status = await call('GET', '/templates/never-ready');
    expect(status.status).toBe(404);
    await expect(Sandbox.create('never-ready', opts)).rejects.toThrow(/not found/);
  });

  it('answers bad input with 4xx codes', async () => {
    const unknownBase = Template().fromTemplate('no-such-template').runCmd('true');
    await expect(Template.build(unknownBase, 'x1', opts)).rejects.toThrow(/no-such-template.*not found/);
    const registry = Template().fromImage('e2bdev/base').runCmd('true');
    // Not a template here: a Docker Hub image, which this machine cannot reach (a 503 naming the registry, not a 500).
    await expect(Template.build(registry, 'x2', opts)).rejects.toThrow(/130428 registry docker\.io unreachable/);
    await expect(Template.build(Template().fromImage('busybox'), 'Bad Name', opts)).rejects.toThrow(/template name/);
    const req = await call('POST', '/v3/templates', { name: 'raw' });
    expect(req.status).toBe(202);
    const { templateID, buildID } = req.json as { templateID: string; buildID: string };
    for (const [body, message] of [
      [{ fromImage: 'busybox', fromTemplate: 'built' }, /exactly one of fromTemplate and fromImage/],
      [{ fromImage: 'busybox', steps: [{ type: 'FROBNICATE', args: [] }] }, /step 1 \(FROBNICATE\): unknown step type/],
      [{ fromImage: 'busybox', steps: [{ type: 'COPY', args: ['a', '/b'], filesHash: 'f'.repeat(64) }] }, /were not uploaded/],
      [{ fromImage: 'busybox', steps: [{ type: 'RUN', args: ['true', 'admin'] }] }, /user must be 'root' or 'user'/],
    ] as const) {
      const r = await call('POST', `/v2/templates/${templateID}/builds/${buildID}`, body);
      expect(r.status).toBe(400);
      expect((r.json as { message: string }).message).toMatch(message);
    }
    expect((await call('GET', `/templates/${templateID}/builds/00000000-0000-0000-0000-000000000000/status`)).status).toBe(404);
    // An upload link is signed: without its signature the PUT is refused.
    const link = (await call('GET', `/templates/${templateID}/files/${'a'.repeat(64)}`)).json as { present: boolean; url: string };
    expect(link.present).toBe(false);
    const forged = await fetch(link.url.replace(/sig=[0-9a-f]+/, `sig=${'0'.repeat(64)}`), { method: 'PUT', body: 'x' });
    expect(forged.status).toBe(401);
  });

  it('lists, tags and deletes templates the way the e2b API does, with real dates', async () => {
    const list = (await call('GET', '/templates')).json as unknown as {
      templateID: string;
      createdAt: string;
      updatedAt: string;
      buildCount: number;
      aliases: string[];
    }[];
    const built = list.find((t) => t.templateID === 'built')!;
    expect(Number.isNaN(Date.parse(built.createdAt))).toBe(false);
    expect(Date.parse(built.updatedAt)).toBeGreaterThanOrEqual(Date.parse(built.createdAt));
    expect(built.buildCount).toBeGreaterThan(0);
    expect(Number.isNaN(Date.parse(list.find((t) => t.templateID === 'host')!.createdAt))).toBe(false);
    expect(await Template.exists('built', opts)).toBe(true);
    expect(await Template.exists('nope', opts)).toBe(false);
    await Template.assignTags('built:v2', 'stable', opts);
    const tags = await Template.getTags('built', opts);
    expect(tags.map((t) => t.tag).sort()).toEqual(['latest', 'stable', 'v2']);
    const stable = await create('built:stable');
    expect((await stable.commands.run('cat /home/user/out/marker')).stdout).toBe('two\n');
    await stable.kill();
    await Template.removeTags('built', 'stable', opts);
    expect((await Template.getTags('built', opts)).map((t) => t.tag).sort()).toEqual(['latest', 'v2']);
    const detail = (await call('GET', '/templates/built')).json as { builds: { buildID: string; status: string; createdAt: string }[] };
    expect(detail.builds.length).toBeGreaterThan(0);
    expect(detail.builds.every((b) => !Number.isNaN(Date.parse(b.createdAt)))).toBe(true);
    expect((await call('DELETE', '/templates/derived')).status).toBe(204);
    const del = await call('DELETE', '/templates/built');
    expect(del.status, JSON.stringify(del.json)).toBe(204);
    expect(await Template.exists('built', opts)).toBe(false);
    expect((await call('DELETE', '/templates/built')).status).toBe(404);
  });

  it('builds from a recipe file with cubectl template build: the same steps, the cache, a failing step, a bad recipe', async () => {
    const recipe = join(ctxDir, 'recipe.yaml');
    await writeFile(
      recipe,
      [
        'name: cli-built',
        'fromImage: busybox',
        'steps:',
        '  - env: {GREETING: yaml}',
        '  - run: {cmd: "echo from-cli-$GREETING > /home/user/cli", user: user}',
        '  - copy: {src: app, dest: /opt/cli/}',
        '  - workdir: /opt/cli',
        'startCmd: exec sleep 1000',
        '',
      ].join('\n'),
    );
    const first = await cubectl(['template', 'build', recipe, '--json'], env);
    expect(first.stderr).toBe('');
    expect(first.code).toBe(0);
    const [rec] = JSON.parse(first.stdout) as {
      ref: string;
      source: string;
      layers: string[];
      config: { env: Record<string, string>; workdir: string; startCmd: string };
    }[];
    expect(rec).toMatchObject({
      ref: 'cli-built:latest',
      source: 'build',
      config: { env: { GREETING: 'yaml' }, workdir: '/opt/cli', startCmd: 'exec sleep 1000' },
    });
    const sbx = await create('cli-built');
    expect((await sbx.commands.run('cat /home/user/cli; ./run.sh; stat -c %U /home/user/cli')).stdout).toBe('from-cli-yaml\nran-yaml\nuser\n');
    await sbx.kill();
    // Again, under the tags given (as E2B: tags replace the default latest): every step from the cache, the same layers.
    const again = await cubectl(['template', 'build', recipe, '--tag', 'v1', 'v2'], env);
    expect(again).toMatchObject({
      code: 0,
      stdout: expect.stringMatching(/^built cli-built:v1 sha256:[0-9a-f]{64} \(\d+ layers\)\nbuilt cli-built:v2 sha256:[0-9a-f]{64} \(\d+ layers\)\n$/),
    });
    expect((JSON.parse((await cubectl(['template', 'inspect', 'cli-built:v1', '--json'], env)).stdout) as { layers: string[] }).layers).toEqual(rec!.layers);

    await writeFile(join(ctxDir, 'bad.json'), JSON.stringify({ name: 'cli-bad', fromImage: 'busybox', steps: [{ run: 'echo nope >&2; exit 9' }] }));
    const failed = await cubectl(['template', 'build', join(ctxDir, 'bad.json')], env);
    expect(failed.code).toBe(1);
    expect(failed.stderr).toMatch(/build failed: step 1 \(RUN echo nope.*\) exited 9.*nope/);
    expect((await cubectl(['template', 'inspect', 'cli-bad'], env)).code).not.toBe(0);

    await writeFile(join(ctxDir, 'typo.yaml'), 'name: x\nfromImage: busybox\nsteps:\n  - rn: true\n');
    const typo = await cubectl(['template', 'build', join(ctxDir, 'typo.yaml')], env);
    expect(typo.code).toBe(2);
    expect(typo.stderr).toMatch(/typo\.yaml: steps\.0/);
    const missing = await cubectl(['template', 'build', join(ctxDir, 'nope.yaml')], env);
    expect(missing).toMatchObject({ code: 2, stderr: expect.stringMatching(/nope\.yaml: no such file/) });
    for (const t of ['v1', 'v2']) expect((await cubectl(['template', 'rm', `cli-built:${t}`], env)).code).toBe(0);
    expect((await cubectl(['template', 'rm', 'cli-built'], env)).code).toBe(0);
    // Ten cubectl runs: each took 6-12 s at load 25 on this machine (60 s timed out, before this change too).
  }, 180_000);

  it('builds over base (the host template): the host /usr stays read-only, the step writes its home', async () => {
    const t = Template()
      .fromTemplate('base')
      .runCmd('echo on-host > /home/user/h && (touch /usr/cube-build-probe 2>/dev/null && echo usr-writable || echo usr-read-only)')
      .runCmd('echo only-prints');
    const log = collect();
    await Template.build(t, 'on-host', { ...opts, onBuildLogs: log.onBuildLogs });
    expect(log.lines).toContain('usr-read-only');
    // A step that changed no file stacks no layer: the host rootfs and the first step's.
    expect(log.lines.some((l) => /\[2\/2\] done in \d+ ms: no file changed, no layer/.test(l))).toBe(true);
    expect(JSON.parse((await cubectl(['template', 'inspect', 'on-host', '--json'], env)).stdout) as { layers: string[]; bindHostUsr: boolean }).toMatchObject({
      layers: [expect.stringMatching(/templates\/host\/rootfs$/), expect.stringMatching(/^sha256:/)],
      bindHostUsr: true,
    });
    const sbx = await create('on-host');
    expect((await sbx.commands.run('cat /home/user/h; python3 -c "print(1+1)"')).stdout).toBe('on-host\n2\n');
    await sbx.kill();
    expect((await call('DELETE', '/templates/on-host')).status).toBe(204);
  });

  it('contains a hostile upload: a symlink in the files cannot take a COPY out of the sandbox', async () => {
    const marker = `cube-build-escape-${process.pid}`;
    const tar = await tarOf([
      { name: 'evil/', type: 'directory' },
      { name: 'evil/out', type: 'symlink', linkname: '/tmp' },
      { name: `evil/out/${marker}`, content: 'escaped?' },
      { name: '../../tmp/' + marker, content: 'escaped?' },
    ]);
    const hash = 'e'.repeat(64);
    const req = (await call('POST', '/v3/templates', { name: 'hostile' })).json as { templateID: string; buildID: string };
    const link = (await call('GET', `/templates/${req.templateID}/files/${hash}`)).json as { url: string };
    expect((await fetch(link.url, { method: 'PUT', body: tar })).status).toBe(201);
    expect(
      (
        await call('POST', `/v2/templates/${req.templateID}/builds/${req.buildID}`, {
          fromImage: 'busybox',
          steps: [{ type: 'COPY', args: ['evil', '/opt/evil/'], filesHash: hash }],
        })
      ).status,
    ).toBe(202);
    let st: { status: string } = { status: 'waiting' };
    for (let i = 0; i < 600 && (st.status === 'waiting' || st.status === 'building'); i++) {
      await new Promise((r) => setTimeout(r, 100));
      st = (await call('GET', `/templates/${req.templateID}/builds/${req.buildID}/status`)).json as { status: string };
    }
    expect(st.status).toBe('ready');
    await expect(access(join('/tmp', marker))).rejects.toThrow(/ENOENT/);
    const sbx = await create('hostile');
    // What the sandbox sees: the file landed in its own /opt/evil/out (a directory: the link is made after the files).
    expect((await sbx.commands.run(`cat /opt/evil/out/${marker}; ls /tmp`)).stdout).toBe('escaped?');
    await sbx.kill();
    expect((await call('DELETE', '/templates/hostile')).status).toBe(204);
  });

  it("keeps the first upload of a files hash (another client's cannot replace it) and refuses one that does not match its hash at build start", async () => {
    const build = async (name: string, hash: string, src: string) => {
      const req = (await call('POST', '/v3/templates', { name })).json as { templateID: string; buildID: string };
      return {
        req,
        start: () =>
          call('POST', `/v2/templates/${req.templateID}/builds/${req.buildID}`, {
            fromImage: 'busybox',
            steps: [{ type: 'COPY', args: [src, '/opt/'], filesHash: hash }],
          }),
      };
    };
    const waitReady = async (templateID: string, buildID: string) => {
      let st: { status: string } = { status: 'waiting' };
      for (let i = 0; i < 600 && (st.status === 'waiting' || st.status === 'building'); i++) {
        await new Promise((r) => setTimeout(r, 100));
        st = (await call('GET', `/templates/${templateID}/builds/${buildID}/status`)).json as { status: string };
      }
      return st.status;
    };
    // The SDK's hash of COPY one.txt /opt/ holding "good".
    const hash = new FilesHash('one.txt', '/opt/')
      .entry('one.txt', S_IFREG | 0o644, 5)
      .data('good\n')
      .digest();
    const victim = await build('kept', hash, 'one.txt');
    // Both clients asked for a link before anything was uploaded; the victim uploads first.
    const victimLink = (await call('GET', `/templates/${victim.req.templateID}/files/${hash}`)).json as { url: string };
    const otherLink = (await call('GET', `/templates/${victim.req.templateID}/files/${hash}`)).json as { url: string };
    expect((await fetch(victimLink.url, { method: 'PUT', body: await tarOf([{ name: 'one.txt', content: 'good\n' }]) })).status).toBe(201);
    expect((await fetch(otherLink.url, { method: 'PUT', body: await tarOf([{ name: 'one.txt', content: 'evil\n' }]) })).status).toBe(201);
    expect((await victim.start()).status).toBe(202);
    expect(await waitReady(victim.req.templateID, victim.req.buildID)).toBe('ready');
    const sbx = await create('kept');
    expect((await sbx.commands.run('cat /opt/one.txt')).stdout).toBe('good\n');
    await sbx.kill();
    // An upload first made under another's hash (predicted) is refused at build start and removed.
    const hash2 = new FilesHash('two.txt', '/opt/')
      .entry('two.txt', S_IFREG | 0o644, 5)
      .data('fine\n')
      .digest();
    const poisoned = await build('poisoned', hash2, 'two.txt');
    const link = (await call('GET', `/templates/${poisoned.req.templateID}/files/${hash2}`)).json as { url: string };
    expect((await fetch(link.url, { method: 'PUT', body: await tarOf([{ name: 'two.txt', content: 'evil\n' }]) })).status).toBe(201);
    const refused = await poisoned.start();
    expect(refused.status).toBe(400);
    expect((refused.json as { message: string }).message).toMatch(/step 1 \(COPY two\.txt \/opt\/\): do not match its files hash|do not match its files hash/);
    expect(((await call('GET', `/templates/${poisoned.req.templateID}/files/${hash2}`)).json as { present: boolean }).present).toBe(false);
    // The SDK's own hashes of files and links pass the check: a build copying a file and a link.
    await symlink('hello.txt', join(ctxDir, 'app', 'hello-link'));
    try {
      const t = Template({ fileContextPath: ctxDir }).fromImage('busybox').copy('app/hello.txt', '/opt/').copy('app/hello-link', '/opt/');
      await Template.build(t, 'sdk-files', opts);
      const s2 = await create('sdk-files');
      expect((await s2.commands.run('cat /opt/hello.txt; readlink /opt/hello-link')).stdout).toBe('hello from the build context\nhello.txt\n');
      await s2.kill();
    } finally {
      await rm(join(ctxDir, 'app', 'hello-link'));
    }
    for (const n of ['kept', 'poisoned', 'sdk-files']) await call('DELETE', `/templates/${n}`);
  }, 300_000);

  it('refuses a build upload whose long-name header claims megabytes (tar-stream would hold the whole body) with 400 at upload, before reading it', async () => {
    // A GNU long-name entry of 8 MiB, gzipped to a few KiB: the kind of upload that grew cubed by the body's size.
    const header = longNameHeader(8 * 2 ** 20);
    const body = gzipSync(Buffer.concat([header, Buffer.alloc(8 * 2 ** 20, 'a'), Buffer.alloc(1024)]));
    const hash = new FilesHash('x.txt', '/opt/')
      .entry('x.txt', S_IFREG | 0o644, 2)
      .data('x\n')
      .digest();
    const req = (await call('POST', '/v3/templates', { name: 'long-name' })).json as { templateID: string; buildID: string };
    const link = (await call('GET', `/templates/${req.templateID}/files/${hash}`)).json as { url: string };
    const put = await fetch(link.url, { method: 'PUT', body });
    expect({ status: put.status, message: ((await put.json()) as { message?: string }).message }).toEqual({
      status: 400,
      message: expect.stringMatching(/GNU long name header of 8388608 bytes/),
    });
    expect(((await call('GET', `/templates/${req.templateID}/files/${hash}`)).json as { present: boolean }).present).toBe(false);
    await call('DELETE', '/templates/long-name');
  });

  it("uploads are each key's own: another key's upload under a build's files hash (a directory, which no hash check can verify) is never what that build copies", async () => {
    await mkdir(join(ctxDir, 'tree'));
    await writeFile(join(ctxDir, 'tree', 'a.txt'), 'good\n');
    try {
      // The SDK's hash of COPY tree /opt/tree/: it covers the directory's st_size here, which the upload does not carry.
      const hash = await filesHash({ step: 0, src: 'tree', dest: '/opt/tree/' }, await copyFiles(ctxDir, 'tree'));
      const made = await call('POST', '/admin/v1/keys', { name: 'other-builder' });
      expect(made.status).toBe(201);
      const other = (made.json as { key: string }).key;
      const asOther = (method: string, path: string, body?: unknown) =>
        fetch(`${d.url}${path}`, {
          method,
          headers: { 'x-api-key': other, 'content-type': 'application/json' },
          ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
        }).then(async (r) => ({ status: r.status, json: (await r.json()) as Record<string, unknown> }));
      // The other key predicts the hash and uploads first, under its own link.
      const req = (await asOther('POST', '/v3/templates', { name: 'kept-dir' })).json as { templateID: string };
      const link = (await asOther('GET', `/templates/${req.templateID}/files/${hash}`)).json as { url: string };
      const evil = await tarOf([
        { name: 'tree/', type: 'directory' },
        { name: 'tree/a.txt', content: 'evil\n' },
      ]);
      expect((await fetch(link.url, { method: 'PUT', body: evil })).status).toBe(201);
      // Something that is not a tar is refused at once, and nothing kept changes.
      expect((await fetch(link.url, { method: 'PUT', body: 'not a tar' })).status).toBe(400);
      expect(((await asOther('GET', `/templates/${req.templateID}/files/${hash}`)).json as { present: boolean }).present).toBe(true);
      // For this key the hash has no upload yet: the SDK uploads its own, and the build copies it.
      expect(((await call('GET', `/templates/${req.templateID}/files/${hash}`)).json as { present: boolean }).present).toBe(false);
      await Template.build(Template({ fileContextPath: ctxDir }).fromImage('busybox').copy('tree', '/opt/tree/'), 'kept-dir', opts);
      // (the SDK's hash is the one predicted: its upload is there now)
      expect(((await call('GET', `/templates/${req.templateID}/files/${hash}`)).json as { present: boolean }).present).toBe(true);
      const sbx = await create('kept-dir');
      expect((await sbx.commands.run('cat /opt/tree/a.txt')).stdout).toBe('good\n');
      await sbx.kill();
    } finally {
      await rm(join(ctxDir, 'tree'), { recursive: true, force: true });
      await call('DELETE', '/templates/kept-dir');
    }
  }, 300_000);

  it("the e2b CLI's template list shows real dates", async () => {
    const r = await execa('node', ['node_modules/@e2b/cli/dist/index.js', 'template', 'list'], {
      env: { E2B_API_KEY: d.apiKey, E2B_API_URL: d.url, NO_COLOR: '1' },
      reject: false,
      timeout: 60_000,
    });
    expect(r.exitCode, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/busybox/);
    expect(r.stdout).not.toMatch(/Invalid Date/);
  });
});
