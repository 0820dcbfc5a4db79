// The real `e2b` npm package, unchanged, against a real cubed: what RL code does with it.
import { setTimeout as sleep } from 'node:timers/promises';
import {
  ALL_TRAFFIC,
  AuthenticationError,
  CommandExitError,
  FileNotFoundError,
  Sandbox,
  SandboxNotFoundError,
  TimeoutError,
  getSignature,
  type SandboxOpts,
} from 'e2b';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startDaemon, type TestDaemon } from '../helpers/daemon.js';
import { startAndRead } from '../helpers/envd-raw.js';
import { startWanHost } from '../helpers/wan.js';

let d: TestDaemon;
let opts: { apiKey: string; apiUrl: string; sandboxUrl: string };
const created: string[] = [];

async function create(extra: SandboxOpts = {}): Promise<Sandbox> {
  const sbx = await Sandbox.create({ ...opts, ...extra });
  created.push(sbx.sandboxId);
  return sbx;
}

beforeAll(async () => {
  d = await startDaemon();
  opts = { apiKey: d.apiKey, apiUrl: d.url, sandboxUrl: d.url };
});

afterAll(async () => {
  try {
    await Promise.all(created.map((id) => Sandbox.kill(id, opts).catch(() => false)));
  } finally {
    await d?.stop();
  }
});

describe('e2b SDK against cubed', () => {
  it('creates with envVars and metadata, runs commands, reports info', async () => {
    const sbx = await create({ envs: { FOO: 'bar' }, metadata: { run: 'r1' }, timeoutMs: 120_000 });
    expect(sbx.sandboxId).toMatch(/^[a-z][a-z0-9]{19}$/);

    const r = await sbx.commands.run('echo hi $FOO; echo err >&2');
    expect(r).toMatchObject({ exitCode: 0, stdout: 'hi bar\n', stderr: 'err\n' });

    const who = await sbx.commands.run('whoami; pwd; echo $HOME');
    expect(who.stdout).toBe('user\n/home/user\n/home/user\n');
    const root = await sbx.commands.run('whoami; pwd', { user: 'root' });
    expect(root.stdout).toBe('root\n/root\n');

    await sbx.files.makeDir('sub');
    const envCwd = await sbx.commands.run('pwd; echo $X-$FOO', { envs: { X: 'y' }, cwd: 'sub' });
    expect(envCwd.stdout).toBe('/home/user/sub\ny-bar\n');

    const failed = await sbx.commands.run('echo partial; exit 3').catch((e: unknown) => e);
    expect(failed).toBeInstanceOf(CommandExitError);
    expect((failed as CommandExitError).exitCode).toBe(3);
    expect((failed as CommandExitError).stdout).toBe('partial\n');
    expect((failed as CommandExitError).message).toMatch(/exit status 3/);

    const chunks: string[] = [];
    await sbx.commands.run('for i in 1 2 3; do echo $i; sleep 0.2; done', { onStdout: (s) => void chunks.push(s) });
    expect(chunks.join('')).toBe('1\n2\n3\n');
    expect(chunks.length).toBeGreaterThanOrEqual(2);

    const info = await sbx.getInfo();
    expect(info).toMatchObject({ sandboxId: sbx.sandboxId, state: 'running', metadata: { run: 'r1' } });
    expect(info.endAt.getTime()).toBeGreaterThan(info.startedAt.getTime());
    expect(await sbx.isRunning()).toBe(true);
  });

  it('runs a background command, lists it and kills it', async () => {
    const sbx = await create();
    const h = await sbx.commands.run('sleep 600', { background: true, timeoutMs: 0 });
    expect(h.pid).toBeGreaterThan(0);
    const listed = await sbx.commands.list();
    expect(listed.map((p) => p.pid)).toContain(h.pid);
    expect(await h.kill()).toBe(true);
    const end = await h.wait().catch((e: unknown) => e);
    expect(end).toBeInstanceOf(CommandExitError);
    expect((end as CommandExitError).exitCode).toBe(-1);
    expect(await sbx.commands.kill(h.pid)).toBe(false);
  });

  it('ends a command at timeoutMs, keeps it through a disconnect, feeds stdin', async () => {
    const sbx = await create();
    const late = await sbx.commands.run('sleep 30 && echo late', { timeoutMs: 1000 }).catch((e: unknown) => e);
    expect(late).toBeInstanceOf(TimeoutError);
    // Connect-Timeout-Ms is the process lifetime: the node kills it, nothing is left running.
    const deadline = Date.now() + 15_000;
    while ((await sbx.commands.list()).some((p) => p.args.join(' ').includes('sleep 30')) && Date.now() < deadline) await sleep(200);
    expect((await sbx.commands.list()).map((p) => p.args.join(' '))).not.toContain('-l -c sleep 30 && echo late');

    // Without a deadline of the client's own (the Python SDK's commands.run(timeout=...)), the
    // server ends the stream with deadline_exceeded, which the SDKs raise as their timeout error.
    // Its envd token as any client gets it (E2B's connect answer; the SDK keeps it protected).
    const conn = await fetch(`${d.url}/sandboxes/${sbx.sandboxId}/connect`, {
      method: 'POST',
      headers: { 'x-api-key': d.apiKey, 'content-type': 'application/json' },
      body: JSON.stringify({ timeout: 120 }),
    });
    const { envdAccessToken } = (await conn.json()) as { envdAccessToken: string };
    const wire = await startAndRead(d.url, { sandboxID: sbx.sandboxId, envdAccessToken }, 'echo started; sleep 30', 1000);
    expect(wire.error?.code).toBe('deadline_exceeded');
    expect(wire.messages.map((m) => Object.keys((m as { event: object }).event)[0])).toEqual(expect.arrayContaining(['start', 'data']));
    expect(wire.messages.some((m) => 'end' in (m as { event: object }).event)).toBe(false);

    const h = await sbx.commands.run('sleep 3; echo done', { background: true });
    await h.disconnect();
    const again = await sbx.commands.connect(h.pid);
    expect((await again.wait()).stdout).toBe('done\n');

    const cat = await sbx.commands.run('cat', { background: true, stdin: true });
    await cat.sendStdin('piped ');
    await sbx.commands.sendStdin(cat.pid, 'in');
    await cat.closeStdin();
    expect((await cat.wait()).stdout).toBe('piped in');
  });

  it('writes, reads, lists, checks, removes files', async () => {
    const sbx = await create();
    const w = await sbx.files.write('dir/a.txt', 'hello');
    expect(w.path).toBe('/home/user/dir/a.txt');
    await sbx.files.write([
      { path: 'dir/b.txt', data: 'bee' },
      { path: '/home/user/other/c.bin', data: new Uint8Array([0, 1, 2, 255]).buffer },
    ]);
    expect(await sbx.files.read('dir/a.txt')).toBe('hello');
    expect([...(await sbx.files.read('/home/user/other/c.bin', { format: 'bytes' }))]).toEqual([0, 1, 2, 255]);
    const list = await sbx.files.list('dir');
    expect(list.map((e) => [e.name, e.type, e.size])).toEqual([
      ['a.txt', 'file', 5],
      ['b.txt', 'file', 3],
    ]);
    expect(list[0]!.owner).toBe('user');
    expect(await sbx.files.exists('dir/a.txt')).toBe(true);
    expect(await sbx.files.makeDir('dir/new/deep')).toBe(true);
    expect(await sbx.files.makeDir('dir/new/deep')).toBe(false);
    await sbx.files.rename('dir/b.txt', 'dir/new/b2.txt');
    expect(await sbx.files.read('dir/new/b2.txt')).toBe('bee');
    await sbx.files.remove('dir/a.txt');
    expect(await sbx.files.exists('dir/a.txt')).toBe(false);
    await expect(sbx.files.read('dir/a.txt')).rejects.toBeInstanceOf(FileNotFoundError);
    await expect(sbx.files.list('nope')).rejects.toBeInstanceOf(FileNotFoundError);
    // A file written through the API is the same file a command sees.
    expect((await sbx.commands.run('cat dir/new/b2.txt')).stdout).toBe('bee');
    // Streams go as application/octet-stream (envd >= 0.5.7).
    await sbx.files.write('streamed.txt', new Blob(['x'.repeat(100_000)]).stream());
    expect((await sbx.commands.run('wc -c < streamed.txt')).stdout.trim()).toBe('100000');
  });

  it('serves uploadUrl/downloadUrl to a plain HTTP client, and refuses tampered or expired signatures', async () => {
    const sbx = await create();
    const other = await create(); // the signature, not the order of sandboxes, picks the target
    const form = new FormData();
    form.append('file', new Blob(['from a signed upload']), 'up.txt');
    const up = await fetch(await sbx.uploadUrl('/home/user/up.txt'), { method: 'POST', body: form });
    expect(up.status).toBe(200);
    expect(await sbx.files.read('/home/user/up.txt')).toBe('from a signed upload');
    expect(await other.files.exists('/home/user/up.txt')).toBe(false);

    const url = await sbx.downloadUrl('/home/user/up.txt', { useSignatureExpiration: 60 });
    expect(url).toMatch(/signature=v1_.*signature_expiration=\d+/);
    const down = await fetch(url);
    expect(down.status).toBe(200);
    expect(await down.text()).toBe('from a signed upload');

    // The same signature for another path, as an upload, or past its expiry: 401 with a reason.
    const tampered = url.replace('up.txt', 'other.txt');
    const bad = await fetch(tampered);
    expect(bad.status).toBe(401);
    expect(((await bad.json()) as { message: string }).message).toMatch(/signature matches no running sandbox/);
    expect((await fetch(url, { method: 'POST', body: form })).status).toBe(401);
    const old = await getSignature({
      path: '/home/user/up.txt',
      operation: 'read',
      user: undefined,
      expirationInSeconds: -10,
      envdAccessToken: (sbx as unknown as { envdAccessToken: string }).envdAccessToken,
    });
    const expired = await fetch(`${d.url}/files?path=%2Fhome%2Fuser%2Fup.txt&signature=${old.signature}&signature_expiration=${old.expiration}`);
    expect(expired.status).toBe(401);
    // A signed URL routed by its sandbox header checks the signature against that sandbox alone.
    const wrongBox = await fetch(url, { headers: { 'e2b-sandbox-id': other.sandboxId } });
    expect(wrongBox.status).toBe(401);
    expect(((await wrongBox.json()) as { message: string }).message).toMatch(new RegExp(`does not match sandbox ${other.sandboxId}`));
  });

  it('refuses envd requests without the access token (the sandbox id alone is not a credential)', async () => {
    const sbx = await create();
    const call = (path: string, headers: Record<string, string>) =>
      fetch(`${d.url}${path}`, {
        method: path === '/health' ? 'GET' : 'POST',
        headers: { 'content-type': 'application/json', 'e2b-sandbox-id': sbx.sandboxId, ...headers },
        ...(path === '/health' ? {} : { body: '{"path":"/"}' }),
      });
    const noToken = await call('/filesystem.Filesystem/ListDir', {});
    expect(noToken.status).toBe(401);
    expect(((await noToken.json()) as { message: string }).message).toMatch(/needs its access token/);
    expect((await fetch(`${d.url}/files?path=/etc/hostname`, { headers: { 'e2b-sandbox-id': sbx.sandboxId } })).status).toBe(401);
    expect((await call('/health', {})).status).toBe(204);
    const token = (sbx as unknown as { envdAccessToken: string }).envdAccessToken;
    expect((await call('/filesystem.Filesystem/ListDir', { 'x-access-token': token })).status).toBe(200);
  });

  it('reaches the internet through the host NAT unless told not to: allowInternetAccess, network.allowOut/denyOut', async () => {
    const wan = await startWanHost(); // a TEST-NET-2 host standing in for the internet
    try {
      const probe = `timeout 3 bash -c 'exec 3<>/dev/tcp/${wan.ip}/${wan.port} && cat <&3'`;
      const reach = (sbx: Sandbox) =>
        sbx.commands.run(probe).then(
          (r) => r.stdout.trim(),
          (e: unknown) => (e instanceof CommandExitError ? `refused (${e.exitCode})` : Promise.reject(e)),
        );
      expect(await reach(await create())).toBe(`from ${wan.hostIp}`);
      expect(await reach(await create({ allowInternetAccess: false }))).toMatch(/^refused/);
      expect(await reach(await create({ network: { denyOut: [ALL_TRAFFIC], allowOut: [wan.ip] } }))).toBe(`from ${wan.hostIp}`);
      expect(await reach(await create({ network: { denyOut: [`${wan.ip}/32`] } }))).toMatch(/^refused/);
      // updateNetwork replaces the rules of a running sandbox; omitted fields go back to the defaults.
      const live = await create();
      await live.updateNetwork({ denyOut: [ALL_TRAFFIC] });
      expect(await reach(live)).toMatch(/^refused/);
      await live.updateNetwork({ allowInternetAccess: false, allowOut: [wan.ip] });
      expect(await reach(live)).toBe(`from ${wan.hostIp}`);
      expect(await live.getInfo()).toMatchObject({ allowInternetAccess: false, network: { allowOut: [wan.ip] } });
      await live.updateNetwork({});
      expect((await live.getInfo()).allowInternetAccess).toBeUndefined();
      expect(await reach(live)).toBe(`from ${wan.hostIp}`);
      await expect(Sandbox.updateNetwork('zzzzzzzzzzzzzzzzzzzz', {}, opts)).rejects.toBeInstanceOf(SandboxNotFoundError);
      // Refused at create, with the reason: a destination the node's deny list closes, a domain name.
      await expect(create({ network: { allowOut: ['10.1.2.3'] } })).rejects.toThrow(/overlaps the node's deny_out 10\.0\.0\.0\/8/);
      await expect(create({ network: { allowOut: ['example.com'] } })).rejects.toThrow(/domain names are not supported/);
    } finally {
      await wan.stop();
    }
  });

  it('lifecycle onTimeout pause: pauses at the timeout instead of killing; autoResume wakes it on the next request', async () => {
    const pausedByTimeout = async (sbx: Sandbox) => {
      for (let i = 0; i < 100; i++) {
        const info = await sbx.getInfo();
        if (info.state === 'paused') return info;
        await sleep(100);
      }
      throw new Error(`sandbox ${sbx.sandboxId} was not paused by its timeout`);
    };
    // The 1 s timeout starts once the file is written: counted from the create, it fired before
    // the first command under load (the create took more than 1 s), which then resumed the sandbox
    // for the default timeout and it was never paused here.
    const auto = await create({ timeoutMs: 60_000, lifecycle: { onTimeout: 'pause', autoResume: true } });
    await auto.commands.run('echo kept > /tmp/state');
    await auto.setTimeout(1_000);
    expect((await pausedByTimeout(auto)).lifecycle).toEqual({ onTimeout: 'pause', autoResume: true });
    // Two requests at once: one resume, both served, memory and files as they were.
    const [a, b] = await Promise.all([auto.commands.run('cat /tmp/state'), auto.files.read('/tmp/state')]);
    expect([a.stdout, b]).toEqual(['kept\n', 'kept\n']);
    expect((await auto.getInfo()).state).toBe('running');

    const manual = await create({ timeoutMs: 1_000, lifecycle: { onTimeout: 'pause' } });
    await pausedByTimeout(manual);
    await expect(manual.commands.run('true')).rejects.toThrow(); // 502: paused, not resumed by traffic
    const again = await Sandbox.connect(manual.sandboxId, opts);
    expect((await again.commands.run('echo back')).stdout).toBe('back\n');
  });

  it('watches a directory', async () => {
    const sbx = await create();
    await sbx.files.makeDir('watched');
    const events: { name: string; type: string }[] = [];
    const w = await sbx.files.watchDir('watched', (e) => void events.push({ name: e.name, type: e.type }), { timeoutMs: 0 });
    try {
      await sbx.files.write('watched/new.txt', 'x');
      const deadline = Date.now() + 15_000;
      while (!events.some((e) => e.name === 'new.txt') && Date.now() < deadline) await sleep(100);
      expect(events).toContainEqual({ name: 'new.txt', type: 'create' });
    } finally {
      await w.stop();
    }
  });

  it('lists with paging and a state filter', async () => {
    const tag = `list-${Date.now()}`;
    const boxes = await Promise.all([0, 1, 2].map(() => create({ metadata: { tag } })));
    await boxes[0]!.pause();
    const seen: string[] = [];
    const pager = Sandbox.list({ ...opts, limit: 2, query: { metadata: { tag } } });
    let pages = 0;
    while (pager.hasNext) {
      const items = await pager.nextItems();
      expect(items.length).toBeLessThanOrEqual(2);
      seen.push(...items.map((s) => s.sandboxId));
      pages++;
    }
    expect(pages).toBe(2);
    expect(seen.sort()).toEqual(boxes.map((b) => b.sandboxId).sort());
    const paused = await Sandbox.list({ ...opts, query: { metadata: { tag }, state: ['paused'] } }).nextItems();
    expect(paused.map((s) => [s.sandboxId, s.state])).toEqual([[boxes[0]!.sandboxId, 'paused']]);
    const running = await Sandbox.list({ ...opts, query: { metadata: { tag }, state: ['running'] } }).nextItems();
    expect(running.map((s) => s.sandboxId).sort()).toEqual([boxes[1]!.sandboxId, boxes[2]!.sandboxId].sort());
  });

  it('pauses, then connect resumes with processes and files kept and time frozen', async () => {
    const sbx = await create();
    await sbx.files.write('state.txt', 'kept');
    // A counter that ticks every 50 ms: if the sandbox really stops while paused, it does not advance. Written by
    // rename: a read between `>`'s truncate and its write would see no number.
    await sbx.commands.run('i=0; while true; do i=$((i+1)); echo $i > counter.new; mv counter.new counter; sleep 0.05; done', {
      background: true,
      timeoutMs: 0,
    });
    await sleep(300);
    const before = Number((await sbx.files.read('counter')).trim());
    expect(await sbx.pause()).toBe(true);
    expect(await sbx.pause()).toBe(false);
    expect((await sbx.getInfo()).state).toBe('paused');
    // While paused, envd traffic is refused the way the SDK expects (502 → not running).
    expect(await sbx.isRunning()).toBe(false);
    await sleep(1500);
    const resumed = await Sandbox.connect(sbx.sandboxId, opts);
    const after = Number((await resumed.files.read('counter')).trim());
    expect(await resumed.files.read('state.txt')).toBe('kept');
    // 1.5 s paused would be ~30 ticks if time ran on; only the few around pause and resume count.
    expect(after - before).toBeLessThan(15);
    await sleep(500);
    expect(Number((await resumed.files.read('counter')).trim())).toBeGreaterThan(after);
    expect((await resumed.getInfo()).state).toBe('running');
  });

  it('kills (true); a repeat of the accepted kill is done again (true, never 404: issue 24), and the sandbox is not found', async () => {
    const sbx = await create();
    expect(await sbx.kill()).toBe(true);
    // A retry whose first answer was lost, or was an error after the delete was remembered.
    expect(await Sandbox.kill(sbx.sandboxId, opts)).toBe(true);
    await expect(Sandbox.getInfo(sbx.sandboxId, opts)).rejects.toBeInstanceOf(SandboxNotFoundError);
    await expect(sbx.commands.run('true')).rejects.toThrow();
  });

  it('kills a sandbox whose timeout expires', async () => {
    const sbx = await create();
    await sbx.setTimeout(1000);
    const gone = async (): Promise<boolean> =>
      Sandbox.getInfo(sbx.sandboxId, opts).then(
        () => false,
        (e: unknown) => e instanceof SandboxNotFoundError,
      );
    const deadline = Date.now() + 30_000;
    while (!(await gone()) && Date.now() < deadline) await sleep(250);
    expect(await gone()).toBe(true);
    expect(await sbx.isRunning()).toBe(false);
    expect(await sbx.kill()).toBe(false);
  });

  it('creates 100 sandboxes concurrently through the SDK, all usable', async () => {
    const boxes = await Promise.all(Array.from({ length: 100 }, (_, i) => create({ metadata: { burst: String(i) } })));
    expect(new Set(boxes.map((b) => b.sandboxId)).size).toBe(100);
    const outs = await Promise.all(boxes.map((b, i) => b.commands.run(`echo ${i}`)));
    expect(outs.map((o) => o.stdout)).toEqual(boxes.map((_, i) => `${i}\n`));
    const killed = await Promise.all(boxes.map((b) => b.kill()));
    expect(killed.every(Boolean)).toBe(true);
  }, 300_000);

  it('refuses a wrong API key with AuthenticationError', async () => {
    await expect(Sandbox.create({ ...opts, apiKey: 'e2b_0000000000000000000000000000000000000000' })).rejects.toBeInstanceOf(AuthenticationError);
  });
});
