// The daemon under hostile clients and sandboxes (issue 30 items 1, 2, 7, 8), through one real
// cubed driven as an attacker would: the published e2b SDK, raw HTTP, hostile archives.
import { Sandbox, type SandboxOpts } from 'e2b';
import { execa } from 'execa';
import { readFile, stat, writeFile } from 'node:fs/promises';
import { Readable } from 'node:stream';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { EventView, SandboxView } from '../../src/api/types.js';
import { CubeClient } from '../../src/cli/client.js';
import { createConsoleStore } from '../../src/tui/store.js';
import { startWatch } from '../../src/tui/watch.js';
import { adminExec, call, startDaemon, type TestDaemon } from '../helpers/daemon.js';
import { startUnread } from '../helpers/envd-raw.js';
import { busyboxLayer, dockerArchive, longNameHeader, tarOf, type TarEntry } from '../helpers/images.js';

const ROOT = join(import.meta.dirname, '..', '..');
// A raw control character anywhere (C0 but line breaks and tabs, DEL, C1).
const RAW_CONTROL = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f]/;

let d: TestDaemon;
let opts: { apiKey: string; apiUrl: string; sandboxUrl: string };
const created: string[] = [];

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

async function sandbox(o: SandboxOpts = {}): Promise<Sandbox> {
  const s = await Sandbox.create({ ...opts, timeoutMs: 300_000, ...o });
  created.push(s.sandboxId);
  return s;
}

/** cubed's resident memory now, and its peak since the last reset (VmHWM), in MiB. */
async function rss(): Promise<{ now: number; peak: number }> {
  const status = await readFile(`/proc/${d.pid}/status`, 'utf8');
  const kib = (k: string) => Number(new RegExp(`^${k}:\\s+(\\d+) kB`, 'm').exec(status)![1]);
  return { now: kib('VmRSS') / 1024, peak: kib('VmHWM') / 1024 };
}
/** Resets the peak (VmHWM) to the current resident size. */
const resetPeak = () => writeFile(`/proc/${d.pid}/clear_refs`, '5');

async function v1Sandbox(): Promise<{ sandboxID: string; envdAccessToken: string }> {
  const r = await call(d, 'POST', '/sandboxes', { templateID: 'base', secure: true, timeout: 300 });
  expect(r.status).toBe(201);
  const s = r.json as { sandboxID: string; envdAccessToken: string };
  created.push(s.sandboxID);
  return s;
}

describe('memory (item 1)', () => {
  it('background commands whose output nobody reads do not grow cubed; the memory goes with the kill', { timeout: 150_000 }, async () => {
    const s = await v1Sandbox();
    await resetPeak();
    const before = await rss();
    const stops = [0, 1, 2].map(() => startUnread(d.url, s, 'cat /dev/zero'));
    await new Promise((r) => setTimeout(r, 8000));
    // Their output held back (the launch helper's credit window) stalls no other command, though they
    // all share its pipe: this one's 575 KiB (more than the window, less than a reader may hold) all come.
    const other = await adminExec(d, s.sandboxID, ['seq', '100000']);
    expect([other.stdout.length, other.stdout.slice(-7)]).toEqual([588_895, '100000\n']);
    await new Promise((r) => setTimeout(r, 8000));
    const during = await rss();
    expect((await call(d, 'DELETE', `/sandboxes/${s.sandboxID}`)).status).toBe(204);
    for (const stop of stops) stop();
    await new Promise((r) => setTimeout(r, 2000));
    const after = await rss();
    // Before: three such commands for 20 s took cubed from 109 to 4,269 MiB, kept after the kill.
    // With each reader bounded at 1 MiB: peak +409, +166 after the kill, cubed at ~100% CPU (the
    // sandbox log's strings of every chunk, V8 heap). Now (the log cuts lines on the bytes; output
    // nobody takes is read at most a chunk per 100 ms, the helper's credit window holding back the
    // rest: process-table.ts): peak +53, +3 to +8 after the kill, cubed at 1-8% CPU (bench/unread-output.ts,
    // load 2.1-5.1). Without the pause: +122 / +88, cubed at 60-90% CPU: these bounds tell the two apart.
    const seen = `from ${before.now} MiB: peak ${during.peak}, after the kill ${after.now}`;
    expect(during.peak - before.now, seen).toBeLessThan(100);
    // After the kill: what the peak took is not always given back at once (+60 of a +65 peak once in a
    // full suite run, +3 to +8 alone): the bound is the peak's.
    expect(after.now - before.now, seen).toBeLessThan(100);
  });

  it('a reader that fell behind gets a marker saying how much was dropped, then the output again', { timeout: 60_000 }, async () => {
    const sbx = await sandbox();
    // The tail line comes 2 s after the 8 MB: a reader still behind then has caught up (it would drop the line).
    const h = await sbx.commands.run('head -c 8000000 /dev/zero | tr "\\0" a; echo; sleep 2; echo tail-line', { background: true });
    const out = await h.wait();
    expect(out.stdout).toContain('tail-line');
    // The SDK reads as fast as it can: on this machine it may or may not fall behind; when it did, the marker says so.
    if (out.stderr) expect(out.stderr).toMatch(/\[cubed: \d+ bytes of output dropped: this reader fell 1 MiB behind\]/);
  });

  it('a build step printing a million lines keeps a bounded log, in memory and on disk', { timeout: 300_000 }, async () => {
    const req = await call(d, 'POST', '/v3/templates', { name: 'chatty' });
    expect(req.status).toBe(202);
    const { templateID, buildID } = req.json as { templateID: string; buildID: string };
    await resetPeak();
    const before = await rss();
    expect(
      (
        await call(d, 'POST', `/v2/templates/${templateID}/builds/${buildID}`, {
          fromTemplate: 'base',
          steps: [{ type: 'RUN', args: ['seq 1000000'], force: true }],
        })
      ).status,
    ).toBe(202);
    let st: { status: string; logEntries: { message: string }[] } = { status: 'building', logEntries: [] };
    for (let i = 0; i < 600 && (st.status === 'building' || st.status === 'waiting'); i++) {
      await new Promise((r) => setTimeout(r, 500));
      st = (await call(d, 'GET', `/templates/${templateID}/builds/${buildID}/status`)).json as typeof st;
    }
    expect(st.status).toBe('ready');
    expect(st.logEntries.length).toBeLessThan(10_100);
    expect(st.logEntries.some((l) => /^990000 more line\(s\) of output not kept \(a build keeps 10000\)$/.test(l.message))).toBe(true);
    expect((await stat(join(d.dataDir, 'builds', `${buildID}.json`))).size).toBeLessThan(4 * 1024 ** 2);
    expect((await rss()).peak - before.now).toBeLessThan(200);
  });

  it('an image archive with a 512 MiB GNU long-name header: 400 at once, no memory taken', { timeout: 300_000 }, async () => {
    const size = 512 * 1024 ** 2;
    const header = longNameHeader(size);
    const zeros = Buffer.alloc(1024 ** 2, 0x61);
    async function* archive() {
      yield header;
      for (let i = 0; i < size / zeros.length; i++) yield zeros;
      yield Buffer.alloc(1024);
    }
    await resetPeak();
    const before = await rss();
    const res = await fetch(`${d.url}/admin/v1/templates/import?name=longname`, {
      method: 'POST',
      headers: { 'x-api-key': d.apiKey, 'content-type': 'application/x-tar' },
      body: Readable.from(archive()) as unknown as NonNullable<RequestInit['body']>,
      duplex: 'half',
    } as RequestInit);
    const body = (await res.json()) as { code: number; message: string };
    expect(res.status).toBe(400);
    expect(body.message).toMatch(/GNU long name header of 536870912 bytes/);
    // Before: tar-stream held the whole header body: 0.9-1.2 GiB more for a 1 GiB one, kept.
    expect((await rss()).peak - before.now).toBeLessThan(200);
  });
});

describe('terminals (item 7)', () => {
  it("control sequences in metadata, event messages and command output never reach the operator's terminal raw", { timeout: 60_000 }, async () => {
    const title = '\x1b]0;pwned\x07';
    const sbx = await sandbox({ metadata: { note: `${title}\x1b[2J\u009b31m`, [`k\x1b[H`]: 'v' } });
    const client = new CubeClient({ baseUrl: d.url, apiKey: d.apiKey });
    const view = (await client.sandboxes()).find((s) => s.sandboxID === sbx.sandboxId)!;
    expect(view.metadata).toEqual({ note: '\\x1b]0;pwned\\x07\\x1b[2J\\u009b31m', 'k\\x1b[H': 'v' });

    // The console's store, as its views render it.
    const store = createConsoleStore({ apiUrl: d.url });
    const w = startWatch({ baseUrl: d.url, apiKey: d.apiKey }, store, { refreshMs: 20 });
    try {
      for (let i = 0; i < 200 && !store.getState().data.sandboxes[sbx.sandboxId]; i++) await new Promise((r) => setTimeout(r, 25));
      const seen = store.getState().data.sandboxes[sbx.sandboxId] as SandboxView | undefined;
      expect(seen?.metadata).toEqual(view.metadata);
      expect(JSON.stringify(store.getState().data)).not.toMatch(/\\u001b|\\u0007|[\u0080-\u009f]/);
    } finally {
      w.stop();
    }

    // cubectl exec to a terminal (a pty from script(1)): shown escaped; to a pipe: the bytes.
    const cubectl = `node bin/cubectl --api ${d.url} sandbox exec ${sbx.sandboxId} -- printf '\\033]0;pwned\\007ok\\n'`;
    const tty = await execa('script', ['-qec', cubectl, '/dev/null'], { cwd: ROOT, env: { CUBE_API_KEY: d.apiKey } });
    expect(tty.stdout).toContain('\\x1b]0;pwned\\x07ok');
    expect(tty.stdout).not.toMatch(RAW_CONTROL);
    const piped = await execa('sh', ['-c', cubectl], { cwd: ROOT, env: { CUBE_API_KEY: d.apiKey } });
    expect(piped.stdout).toBe(`${title}ok`);
  });
});

/** CPU seconds (user + system) the process has used, from /proc/<pid>/stat. */
async function cpuSeconds(pid: number): Promise<number> {
  const stat = await readFile(`/proc/${pid}/stat`, 'utf8');
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(f[11]) + Number(f[12])) / 100; // utime, stime (fields 14, 15) in clock ticks (USER_HZ 100)
}

async function events(sandboxID: string): Promise<EventView[]> {
  return ((await call(d, 'GET', '/admin/v1/events?limit=1000')).json as EventView[]).filter((e) => e.sandboxID === sandboxID);
}

describe('CPU (item 2)', () => {
  it('no walk of a sandbox with 100,000 files on any timer, a listing of it bounded, and OOM kills are still noticed', { timeout: 240_000 }, async () => {
    const sbx = await sandbox();
    // 100,000 empty files and a 1,000-deep tree in the writable layer.
    await sbx.commands.run(
      'mkdir -p /home/user/m && cd /home/user/m && seq 100000 | xargs touch && d=/home/user/deep && for i in $(seq 1000); do d=$d/x; done && mkdir -p $d',
      { timeoutMs: 180_000 },
    );
    await sbx.getMetrics(); // arms the E2B metrics sampling (every 5 s), another timer that walked
    const window = 5;
    const before = await cpuSeconds(d.pid);
    await new Promise((r) => setTimeout(r, window * 1000));
    const used = (await cpuSeconds(d.pid)) - before;
    // Walking it every second took cubed to 100-230% of a core (so 5-11.5 s here); idle is ~1% (0.17 s in 10 s at load 11).
    // A bound with a wide margin, CPU time (not wall time), so the machine's load does not move it.
    expect(used).toBeLessThan(window * 0.25);
    // A listing is bounded too: 100,000 entries at most in one answer (this tree holds 100,001 within depth 2).
    expect((await sbx.files.list('/home/user/m', { depth: 1 })).length).toBe(100_000);
    await expect(sbx.files.list('/home/user', { depth: 2 })).rejects.toThrow(/holds more than 100000 entries within depth 2/);

    // An OOM kill of a process no exec is waiting for (only the cgroup's counter can tell).
    // tail holds /dev/zero's one endless line in memory: past the limit in well under a second (the
    // shell string it replaced took about 15 s to grow there at load 11).
    await sbx.commands.run(`nohup sh -c 'sleep 1; tail /dev/zero' >/dev/null 2>&1 &`);
    let oom: EventView | undefined;
    for (let i = 0; i < 300 && !oom; i++) {
      await new Promise((r) => setTimeout(r, 200));
      oom = (await events(sbx.sandboxId)).find((e) => e.kind === 'sandbox.oom');
    }
    if (!oom) console.log(await events(sbx.sandboxId), (await sbx.commands.run('ps aux; free -m', { user: 'root' })).stdout);
    expect(oom?.message).toMatch(/OOM-killed at the 256 MiB limit/);
  });
});

describe('smaller (item 8)', () => {
  it('cubed.db (tokens, env vars) is 0600 although the data dir existed before', async () => {
    expect((await stat(join(d.dataDir, 'cubed.db'))).mode & 0o777).toBe(0o600);
  });

  it('a metadata filter on __proto__ matches no sandbox without that key', async () => {
    await sandbox({ metadata: { team: 'a' } });
    const all = await fetch(`${d.url}/v2/sandboxes`, { headers: { 'x-api-key': d.apiKey } });
    expect(((await all.json()) as unknown[]).length).toBeGreaterThan(0);
    const r = await fetch(`${d.url}/v2/sandboxes?metadata=${encodeURIComponent('__proto__=x')}`, { headers: { 'x-api-key': d.apiKey } });
    expect(r.status).toBe(200);
    expect(await r.json()).toEqual([]);
  });

  it('a wrong access token without a sandbox id: 401 with a JSON body, not 502', async () => {
    const r = await fetch(`${d.url}/filesystem.Filesystem/ListDir`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-access-token': 'wrong' },
      body: '{"path":"/"}',
    });
    expect(r.status).toBe(401);
    expect(await r.json()).toMatchObject({ code: 401 });
  });

  it('a body over 1 MiB gets 400 with a JSON body, not a cut connection', async () => {
    const r = await fetch(`${d.url}/sandboxes`, {
      method: 'POST',
      headers: { 'x-api-key': d.apiKey, 'content-type': 'application/json' },
      body: JSON.stringify({ templateID: 'base', metadata: { big: 'x'.repeat(2 * 1024 ** 2) } }),
    });
    expect(r.status).toBe(400);
    expect(await r.json()).toMatchObject({ code: 400, message: expect.stringMatching(/larger than 1048576 bytes/) });
  });

  // The files API's routes as raw HTTP (the SDK would refuse some of these paths itself).
  const envd = (s: { sandboxID: string; envdAccessToken: string }, user = 'user') => ({
    'e2b-sandbox-id': s.sandboxID,
    'x-access-token': s.envdAccessToken,
    authorization: `Basic ${Buffer.from(`${user}:`).toString('base64')}`,
  });
  const rpc = async (s: { sandboxID: string; envdAccessToken: string }, method: string, body: unknown, user = 'user') => {
    const r = await fetch(`${d.url}/filesystem.Filesystem/${method}`, {
      method: 'POST',
      headers: { ...envd(s, user), 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
    return { status: r.status, body: (await r.json()) as { code: unknown; message: string } };
  };
  const rest = async (s: { sandboxID: string; envdAccessToken: string }, method: 'GET' | 'POST', path: string, data?: string | Buffer, user = 'user') => {
    const r = await fetch(`${d.url}/files?path=${encodeURIComponent(path)}&username=${user}`, {
      method,
      headers: { ...envd(s, user), ...(data !== undefined ? { 'content-type': 'application/octet-stream' } : {}) },
      ...(data !== undefined ? { body: data } : {}),
    });
    return { status: r.status, body: (await r.json().catch(() => ({}))) as { code: unknown; message: string } };
  };

  it('a 300-byte file name and a 5,000-byte path: 400 with a JSON body on every files route, not 500', async () => {
    const s = await v1Sandbox();
    for (const p of [`/home/user/${'a'.repeat(300)}`, `/home/user/${'b/'.repeat(2500)}x`]) {
      const answers = [
        await rest(s, 'POST', p, 'x'),
        await rest(s, 'GET', p),
        await rpc(s, 'Stat', { path: p }),
        await rpc(s, 'ListDir', { path: p }),
        await rpc(s, 'MakeDir', { path: p }),
        await rpc(s, 'Remove', { path: p }),
        await rpc(s, 'Move', { source: '/home/user', destination: p }),
      ];
      for (const a of answers) expect(a, p.slice(0, 20)).toMatchObject({ status: 400, body: { message: expect.stringMatching(/a (name|path) of \d+ bytes/) } });
    }
  });

  it('a write at full quota: 400 saying the disk is full, not 500', { timeout: 120_000 }, async () => {
    const s = await sandbox();
    await s.commands.run('dd if=/dev/zero of=/home/user/fill bs=4M 2>/dev/null; sync; true', { user: 'root', timeoutMs: 100_000 });
    try {
      // (the SDK's errors for a 400: InvalidArgumentError; a 500 would be a SandboxError)
      await expect(s.files.write('/home/user/more', new Blob([Buffer.alloc(4 << 20, 1)]))).rejects.toThrow(/no space left .*the sandbox's disk is full/);
      await expect(s.files.makeDir('/home/user/newdir/a')).rejects.toThrow(/no space left .*the sandbox's disk is full/);
    } finally {
      await s.commands.run('rm -f /home/user/fill', { user: 'root' });
    }
  });

  it('a depth-2 listing of / answers 200: /proc, /dev and /sys are listed, not entered', async () => {
    const s = await v1Sandbox();
    for (const user of ['user', 'root']) {
      const r = await rpc(s, 'ListDir', { path: '/', depth: 2 }, user);
      expect(r.status).toBe(200);
      const paths = (r.body as unknown as { entries: { path: string }[] }).entries.map((e) => e.path);
      expect(paths).toEqual(expect.arrayContaining(['/proc', '/dev', '/etc', '/etc/passwd']));
      expect(paths.filter((p) => /^\/(proc|dev|sys)\//.test(p))).toEqual([]);
    }
  });

  it('paths that change under a call (a symlink race) never give 5xx', { timeout: 240_000 }, async () => {
    const s = await v1Sandbox();
    const sbx = await Sandbox.connect(s.sandboxID, opts);
    // Deterministic halves of the race: the user's check meets a file where a directory was
    // (ENOTDIR inside the sandbox), a listing meets a link it cannot read (/proc/self, outside).
    expect((await rpc(s, 'Stat', { path: '/etc/passwd/x' })).status).toBe(400);
    // Then the race itself: a process swapping directories, links, files and FIFOs under the paths.
    await sbx.commands.run('mkdir -p /home/user/race/dd && chmod -R 777 /home/user/race', { user: 'root' });
    await sbx.files.write('/tmp/swap.py', SWAPPER, { user: 'root' });
    const swapper = await sbx.commands.run('python3 /tmp/swap.py', { background: true, user: 'root', timeoutMs: 0 });
    const R = '/home/user/race';
    const ops = (u: string) => [
      () => rpc(s, 'Stat', { path: `${R}/x` }, u),
      () => rpc(s, 'Stat', { path: `${R}/d/f` }, u),
      () => rpc(s, 'ListDir', { path: R, depth: 3 }, u),
      () => rest(s, 'GET', `${R}/x`, undefined, u),
      () => rest(s, 'POST', `${R}/d/f`, 'w', u),
      () => rest(s, 'POST', `${R}/x/new/deep`, 'w', u),
      () => rpc(s, 'Remove', { path: `${R}/d/sub` }, u),
      () => rpc(s, 'MakeDir', { path: `${R}/d/m/n` }, u),
      () => rpc(s, 'Move', { source: `${R}/x`, destination: `${R}/d/moved` }, u),
    ];
    const failures: string[] = [];
    try {
      for (let round = 0; round < 30; round++) {
        for (const r of await Promise.all([...ops('root'), ...ops('user')].map((o) => o())))
          if (r.status >= 500) failures.push(`${r.status} ${r.body.message}`);
      }
    } finally {
      await swapper.kill();
    }
    expect(failures).toEqual([]);
  });

  it('hostile image layers and documents: 400 IMAGE_INVALID, never 500; a later entry wins over an earlier whiteout', { timeout: 180_000 }, async () => {
    const base = await tarOf(busyboxLayer());
    const over = async (entries: TarEntry[]) => dockerArchive([base, await tarOf(entries)], {});
    const manifest = (m: unknown, config?: unknown) =>
      tarOf([{ name: 'manifest.json', content: JSON.stringify(m) }, ...(config !== undefined ? [{ name: 'c.json', content: JSON.stringify(config) }] : [])]);
    const cases: [string, Buffer][] = [
      [
        'a hard link to itself',
        await over([
          { name: 'x', content: 'a' },
          { name: 'x', type: 'link', linkname: 'x' },
        ]),
      ],
      ['a name of 300 bytes', await over([{ name: 'n'.repeat(300), content: 'a' }])],
      ['a link target of 5000 bytes', await over([{ name: 'l', type: 'symlink', linkname: 'q'.repeat(5000) }])],
      ['a path 2100 directories deep', await over([{ name: `${'d/'.repeat(2100)}f`, content: 'a' }])],
      ['a whiteout of 300 bytes', await over([{ name: `.wh.${'w'.repeat(300)}` }])],
      ['layers that are numbers', await manifest([{ Config: 'c.json', Layers: [5] }], { rootfs: { diff_ids: [] } })],
      ['a config that is null', await manifest([{ Config: 'c.json', Layers: [] }], null)],
      ['a config name that is a number', await manifest([{ Config: 7, Layers: [] }])],
      ['an index whose manifests are a number', await tarOf([{ name: 'index.json', content: JSON.stringify({ manifests: 5 }) }])],
      ['Env a number', await dockerArchive([base], { Env: 5 as never })],
      ['User a number', await dockerArchive([base], { User: 5 as never })],
      ['WorkingDir a number', await dockerArchive([base], { WorkingDir: 5 as never })],
    ];
    for (const [what, body] of cases) {
      const r = await fetch(`${d.url}/admin/v1/templates/import?name=hostile-layer`, {
        method: 'POST',
        headers: { 'x-api-key': d.apiKey, 'content-type': 'application/x-tar' },
        body,
      });
      expect({ what, status: r.status, body: await r.json() }).toMatchObject({ what, status: 400, body: { code: 130420, message: expect.any(String) } });
    }
    // Tar semantics, the later entry wins: an entry at (or below) a path whited out before it stays;
    // an opaque directory whited out after it goes (both failed the import with 500 before).
    const later = await over([
      { name: '.wh.foo' },
      { name: 'foo', content: 'kept\n' },
      { name: '.wh.bar' },
      { name: 'bar/', type: 'directory' },
      { name: 'bar/baz', content: 'below\n' },
      { name: 'dd/', type: 'directory' },
      { name: 'dd/.wh..wh..opq' },
      { name: '.wh.dd' },
    ]);
    const r = await fetch(`${d.url}/admin/v1/templates/import?name=later-wins`, {
      method: 'POST',
      headers: { 'x-api-key': d.apiKey, 'content-type': 'application/x-tar' },
      body: later,
    });
    expect(r.status).toBe(201);
    const sbx = await Sandbox.create('later-wins', { ...opts, timeoutMs: 120_000 });
    created.push(sbx.sandboxId);
    expect((await sbx.commands.run('cat /foo /bar/baz; ls -d /dd 2>&1 || true')).stdout).toMatch(/^kept\nbelow\n.*No such file/);
    await sbx.kill();
  });
});

// Swaps /home/user/race/x and /home/user/race/d between a directory (with files), a link out
// (/etc), a relative link, a file and a FIFO, each by an atomic rename, for up to 200 s.
const SWAPPER = `
import os, time
os.chdir('/home/user/race')
def mk(kind, name):
    if kind == 'dir':
        os.mkdir(name); open(name + '/f', 'w').write('x'); os.mkdir(name + '/sub'); open(name + '/sub/g', 'w').write('y')
    elif kind == 'link': os.symlink('/etc', name)
    elif kind == 'rel': os.symlink('dd', name)
    elif kind == 'file': open(name, 'w').write('z')
    elif kind == 'fifo': os.mkfifo(name)
kinds = ['dir', 'link', 'file', 'fifo', 'rel', 'dir']
i = 0
end = time.time() + 200
while time.time() < end:
    for name in ['x', 'd']:
        tmp = name + '.tmp'
        try:
            mk(kinds[i % len(kinds)], tmp)
            if os.path.isdir(name) and not os.path.islink(name):
                os.rename(name, name + '.old'); os.rename(tmp, name); os.system('rm -rf ' + name + '.old')
            else:
                os.rename(tmp, name)
        except Exception:
            os.system('rm -rf ' + tmp)
    i += 1
`;
