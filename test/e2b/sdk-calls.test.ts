// The SDK calls of docs/e2b.md's compatibility matrix that no other file drives, with the real
// `e2b` SDK unchanged: getFullInfo and betaPause, files.writeFiles, the git helpers (which run git
// through commands.run), the template calls around a build (buildInBackground, getBuildStatus,
// aliasExists, toJSON, toDockerfile), the builder's runCmd helpers, and what has no counterpart
// here (the MCP token, E2B's mcp-gateway and devcontainer templates, the secrets placeholders).
import { BuildError, FileNotFoundError, Sandbox, Secret, Template } from 'e2b';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startDaemon, type TestDaemon } from '../helpers/daemon.js';
import { sdkClient, type SdkClient } from '../helpers/sdk.js';

let d: TestDaemon;
let sdk: SdkClient;
let opts: SdkClient['opts'];
let sbx: Sandbox;

beforeAll(async () => {
  d = await startDaemon();
  sdk = sdkClient(d);
  opts = sdk.opts;
  sbx = await sdk.create('base', { timeoutMs: 300_000 });
}, 120_000);

afterAll(() => Promise.resolve(sdk?.killAll()).finally(() => d?.stop()));

const failure = (p: Promise<unknown>): Promise<Error> =>
  p.then(
    () => {
      throw new Error('expected a failure');
    },
    (e: unknown) => e as Error,
  );

describe('sandbox calls', () => {
  it('getFullInfo, files.writeFiles, and betaPause (static and instance) with connect resuming', async () => {
    expect((await Sandbox.getFullInfo(sbx.sandboxId, opts)).state).toBe('running');
    const written = await sbx.files.writeFiles([
      { path: '/tmp/w1', data: 'one' },
      { path: '/tmp/w2', data: 'two' },
    ]);
    expect(written.map((w) => w.path)).toEqual(['/tmp/w1', '/tmp/w2']);
    expect(await sbx.files.read('/tmp/w2')).toBe('two');
    const other = await Sandbox.create({ ...opts, timeoutMs: 120_000 });
    try {
      expect(await other.betaPause()).toBe(true);
      expect((await Sandbox.getInfo(other.sandboxId, opts)).state).toBe('paused');
      await Sandbox.connect(other.sandboxId, opts);
      expect(await Sandbox.betaPause(other.sandboxId, opts)).toBe(true);
      expect(await (await Sandbox.connect(other.sandboxId, opts)).isRunning()).toBe(true);
    } finally {
      await other.kill();
    }
  });

  it('getMcpUrl names port 50005, where nothing serves; getMcpToken finds no token', async () => {
    expect(sbx.getMcpUrl()).toMatch(new RegExp(`^https://50005-${sbx.sandboxId}\\.`));
    expect(await failure(sbx.getMcpToken())).toBeInstanceOf(FileNotFoundError);
  });
});

describe('sbx.git', () => {
  it('init, config, add, commit, branches, remotes, push, pull, reset, restore, clone, status, credentials', async () => {
    const repo = '/home/user/repo';
    expect((await sbx.commands.run('git init -q --bare -b main /home/user/origin.git')).exitCode).toBe(0);
    await sbx.git.init('/home/user/fresh', { initialBranch: 'main' });
    expect((await sbx.git.status('/home/user/fresh')).currentBranch).toBe('main');
    await sbx.git.clone('/home/user/origin.git', { path: repo });
    await sbx.git.configureUser('Cube', 'cube@example.com', { scope: 'global' });
    await sbx.git.setConfig('user.name', 'Local', { scope: 'local', path: repo });
    expect(await sbx.git.getConfig('user.name', { scope: 'local', path: repo })).toBe('Local');
    await sbx.files.write(`${repo}/f.txt`, 'one\n');
    await sbx.git.add(repo);
    await sbx.git.commit(repo, 'first');
    await sbx.git.push(repo, { remote: 'origin', branch: 'main', setUpstream: true });
    await sbx.git.pull(repo, { remote: 'origin', branch: 'main' });
    await sbx.git.createBranch(repo, 'side');
    expect((await sbx.git.branches(repo)).branches.sort()).toEqual(['main', 'side']);
    await sbx.git.checkoutBranch(repo, 'main');
    await sbx.git.deleteBranch(repo, 'side');
    await sbx.git.remoteAdd(repo, 'mirror', 'https://git.example/mirror.git');
    expect(await sbx.git.remoteGet(repo, 'mirror')).toBe('https://git.example/mirror.git');
    await sbx.files.write(`${repo}/f.txt`, 'changed\n');
    expect((await sbx.git.status(repo)).hasChanges).toBe(true);
    await sbx.git.restore(repo, { paths: ['f.txt'] });
    expect(await sbx.files.read(`${repo}/f.txt`)).toBe('one\n');
    await sbx.git.reset(repo, { mode: 'hard' });
    expect((await sbx.git.status(repo)).isClean).toBe(true);
    await sbx.git.dangerouslyAuthenticate({ username: 'u', password: 'p', host: 'git.example' });
    expect((await sbx.commands.run('git config --global credential.helper')).stdout.trim()).toBe('store');
  });
});

describe('Template', () => {
  it('toJSON and toDockerfile (in the SDK alone); aliasExists', async () => {
    expect(JSON.parse(await Template.toJSON(Template().fromTemplate('base').runCmd('echo hi')))).toMatchObject({ fromTemplate: 'base' });
    expect(Template.toDockerfile(Template().fromImage('debian:stable').runCmd('echo hi'))).toBe('FROM debian:stable\nRUN echo hi\n');
    expect(await Template.aliasExists('base', opts)).toBe(true);
    expect(await Template.aliasExists('no-such-alias', opts)).toBe(false);
  });

  it('buildInBackground + getBuildStatus; the runCmd helpers (makeDir, makeSymlink, rename, remove, copyItems, gitClone)', async () => {
    const t = Template()
      .fromTemplate('base')
      .makeDir('/home/user/d')
      .makeSymlink('/home/user/d', '/home/user/l')
      .runCmd('echo a > /home/user/d/f && git init -q /home/user/src && git -C /home/user/src -c user.name=a -c user.email=a@b commit -q --allow-empty -m x')
      .rename('/home/user/d/f', '/home/user/d/g')
      .copyItems([{ src: 'sdk-calls.test.ts', dest: '/home/user/p.json' }]) // relative to this file's directory
      .gitClone('file:///home/user/src', '/home/user/cl') // /tmp is each step's own; file:// makes no hardlinks into the lower layer
      .remove('/home/user/d/g');
    const build = await Template.buildInBackground(t, 'matrix-bg', opts);
    let status = await Template.getBuildStatus(build, opts);
    for (let i = 0; i < 120 && (status.status === 'building' || status.status === 'waiting'); i++) {
      await new Promise((r) => setTimeout(r, 500));
      status = await Template.getBuildStatus(build, opts);
    }
    expect({ status: status.status, reason: status.reason }).toEqual({ status: 'ready', reason: undefined });
    const made = await Sandbox.create('matrix-bg', opts);
    try {
      const r = await made.commands.run('readlink /home/user/l; ls /home/user/d | wc -l; test -f /home/user/p.json && test -d /home/user/cl/.git && echo ok');
      expect(r.stdout).toBe('/home/user/d\n0\nok\n');
    } finally {
      await made.kill();
    }
    const unknown = await failure(Template.getBuildStatus({ ...build, buildId: '00000000-0000-0000-0000-000000000000' }, opts));
    expect(unknown).toBeInstanceOf(BuildError);
    expect(unknown.message).toMatch(/404/);
  });

  it("the helpers that need a tool fail as a step (BuildError): pip on base's Debian Python, apt on base, bun", async () => {
    const step = async (t: Parameters<typeof Template.build>[0], name: string) => failure(Template.build(t, name, opts));
    expect((await step(Template().fromTemplate('base').pipInstall('six'), 'matrix-pip')).message).toMatch(/externally-managed-environment/);
    expect((await step(Template().fromTemplate('base').aptInstall('hello'), 'matrix-apt')).message).toMatch(/exited 100/);
    expect((await step(Template().fromTemplate('base').bunInstall('left-pad'), 'matrix-bun')).message).toMatch(/exited 127/);
  });

  it("E2B's own templates (mcp-gateway, devcontainer) and Docker Hub images are not here", async () => {
    for (const [t, name] of [
      [Template().fromTemplate('mcp-gateway').addMcpServer('brave'), 'matrix-mcp'],
      [Template().fromTemplate('devcontainer').betaDevContainerPrebuild('/w'), 'matrix-dc1'],
      [Template().fromTemplate('devcontainer').betaSetDevContainerStart('/w'), 'matrix-dc2'],
    ] as const) {
      const e = await failure(Template.build(t, name, opts));
      expect(e).toBeInstanceOf(BuildError);
      expect(e.message).toMatch(/404.*not found/);
    }
  });

  it('fromAWSRegistry and fromGCPRegistry are refused at build start', async () => {
    const aws = Template().fromAWSRegistry('1.dkr.ecr.us-east-1.amazonaws.com/x:1', { accessKeyId: 'a', secretAccessKey: 'b', region: 'us-east-1' });
    const gcp = Template().fromGCPRegistry('gcr.io/x/y:1', { serviceAccountJSON: { type: 'service_account' } });
    for (const [t, name] of [
      [aws, 'matrix-aws'],
      [gcp, 'matrix-gcp'],
    ] as const) {
      const e = await failure(Template.build(t, name, opts));
      expect(e).toBeInstanceOf(BuildError);
      expect(e.message).toMatch(/400/);
    }
  });
});

describe('Secret', () => {
  it('exists and destroy answer false (a 404); a create with fill or iamToken is refused (400), not run without them', async () => {
    expect(await Secret.exists('token', opts)).toBe(false); // the SDK's answer to a 404
    expect(await Secret.destroy('token', opts)).toBe(false);
    const filled = await failure(Sandbox.create({ ...opts, envs: { A: Secret.fill('TOKEN') } }));
    expect(filled.message).toMatch(/400.*env A holds an E2B secret placeholder/);
    const iam = { iam: { tokens: { aws: Secret.iamToken({ audience: 'sts.amazonaws.com', tokenType: 'JWT-SVID' }) } } };
    const withIam = await failure(Sandbox.create({ ...opts, ...(iam as object) }));
    expect(withIam.message).toMatch(/400.*IAM tokens/);
  });
});
