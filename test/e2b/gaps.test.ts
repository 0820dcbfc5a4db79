// Smaller E2B gaps, with the real `e2b` SDK unchanged: non-ASCII file names, what getInfo always
// reports, and options cubed cannot honour refused with a 400 that says so.
import { readdirSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { execa } from 'execa';
import { Sandbox, SandboxError, Secret, SecretError } from 'e2b';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { metricOf, within } from '../../src/api/e2b/metrics.js';
import { contentDisposition, metadataOf } from '../../src/api/envd/files.js';
import { startDaemon, type TestDaemon } from '../helpers/daemon.js';

let d: TestDaemon;
let opts: { apiKey: string; apiUrl: string; sandboxUrl: string };
let sbx: Sandbox;

beforeAll(async () => {
  d = await startDaemon();
  opts = { apiKey: d.apiKey, apiUrl: d.url, sandboxUrl: d.url };
  sbx = await Sandbox.create({ ...opts, timeoutMs: 300_000 });
});

afterAll(async () => {
  try {
    await sbx?.kill();
  } finally {
    await d?.stop();
  }
});

const openFds = () => readdirSync(`/proc/${d.pid}/fd`).length;

describe('file names beyond ASCII', () => {
  it.each([
    ['plain.txt', `inline; filename="plain.txt"; filename*=UTF-8''plain.txt`],
    ['日本語.txt', `inline; filename="___.txt"; filename*=UTF-8''%E6%97%A5%E6%9C%AC%E8%AA%9E.txt`],
    ['a "quoted" \\ name\'s (1).txt', `inline; filename="a _quoted_ _ name's (1).txt"; filename*=UTF-8''a%20%22quoted%22%20%5C%20name%27s%20%281%29.txt`],
  ])('content-disposition of %s', (name, want) => expect(contentDisposition(name)).toBe(want));

  it('reads and downloads CJK and emoji names, and keeps no file handle open per read', async () => {
    const name = '数据-🎉-файл.txt';
    await sbx.files.write(name, 'héllo 世界\n');
    expect(await sbx.files.read(name)).toBe('héllo 世界\n');
    const before = openFds();
    for (let i = 0; i < 30; i++) expect(await sbx.files.read(name)).toBe('héllo 世界\n');
    const r = await fetch(await sbx.downloadUrl(name));
    expect(r.status).toBe(200);
    expect(r.headers.get('content-disposition')).toBe(`inline; filename="__-_-____.txt"; filename*=UTF-8''${encodeURIComponent(name)}`);
    expect(await r.text()).toBe('héllo 世界\n');
    // Keep-alive sockets come and go; 30 leaked handles do not.
    expect(openFds() - before).toBeLessThan(10);
  });
});

describe('watchDir (inotify inside the sandbox)', () => {
  type Seen = { name: string; type: string; entry?: { name: string; type?: string; size: number } };
  /** Events of a watch while `cmd` runs, until `until` holds (or 15 s). */
  async function watching(dir: string, cmd: string, until: (e: Seen[]) => boolean, o: { recursive?: boolean; includeEntry?: boolean } = {}) {
    await sbx.commands.run(`rm -rf ${dir} && mkdir -p ${dir}`);
    const seen: Seen[] = [];
    const w = await sbx.files.watchDir(
      dir,
      (e) => void seen.push({ name: e.name, type: e.type, ...(e.entry ? { entry: { name: e.entry.name, type: e.entry.type, size: e.entry.size } } : {}) }),
      { timeoutMs: 0, ...o },
    );
    try {
      await sbx.commands.run(cmd, { cwd: `/home/user/${dir}` });
      for (const deadline = Date.now() + 15_000; !until(seen) && Date.now() < deadline;) await sleep(50);
      return seen;
    } finally {
      await w.stop();
    }
  }
  const has = (name: string, type: string) => (e: Seen[]) => e.some((x) => x.name === name && x.type === type);

  it('sees renames, chmod, every write, and files that lived a moment', async () => {
    // Each write of `a` follows another event: the kernel merges an event identical to the last
    // one still queued (so back-to-back writes the watcher has not read yet are one, as in envd).
    const seen = await watching(
      'w1',
      'echo 1 > a; echo o > o; echo 2 >> a; echo o >> o; echo 3 >> a; mv a b; chmod 600 b; touch brief; rm brief',
      has('brief', 'remove'),
    );
    const of = (name: string) => seen.filter((e) => e.name === name).map((e) => e.type);
    expect(of('a')).toEqual(['create', 'write', 'write', 'write', 'rename']);
    expect(of('b')).toEqual(['create', 'chmod']);
    expect(of('brief')).toEqual(['create', 'chmod', 'remove']);
    // Stopping the watch ends its watcher inside the sandbox.
    const watchers = async () => (await sbx.commands.run('cat /proc/[0-9]*/comm 2>/dev/null | grep -c cube-launch || true')).stdout.trim();
    for (const deadline = Date.now() + 5000; (await watchers()) !== '0' && Date.now() < deadline;) await sleep(100);
    expect(await watchers()).toBe('0');
  });

  it('recursive watches see directories made after the start; includeEntry describes what exists', async () => {
    const seen = await watching('w2', 'mkdir -p sub/deeper && sleep 0.2 && printf 12345 > sub/deeper/f && rm -f nothing', has('sub/deeper/f', 'write'), {
      recursive: true,
      includeEntry: true,
    });
    expect(seen).toContainEqual({ name: 'sub', type: 'create', entry: { name: 'sub', type: 'dir', size: expect.any(Number) } });
    expect(seen).toContainEqual({ name: 'sub/deeper/f', type: 'write', entry: { name: 'f', type: 'file', size: 5 } });
  });

  it('refuses a path that is not a directory', async () => {
    await sbx.files.write('plain-file', 'x');
    await expect(sbx.files.watchDir('plain-file', () => undefined)).rejects.toThrow(/not a directory/);
    await expect(sbx.files.watchDir('no-such-dir', () => undefined)).rejects.toThrow(/not found/);
  });
});

describe('file metadata (envd 0.6.2: user.e2b.* xattrs)', () => {
  it('is kept with the file, listed, replaced by the next upload and cleared by one without', async () => {
    const w = await sbx.files.write('meta/a.txt', 'x', { metadata: { Owner: 'rl', step: '7' } });
    expect(w.metadata).toEqual({ owner: 'rl', step: '7' });
    expect((await sbx.files.getInfo('meta/a.txt')).metadata).toEqual({ owner: 'rl', step: '7' });
    // Inside the sandbox they are the file's extended attributes.
    expect((await sbx.commands.run(`python3 -c "import os; print(sorted(os.listxattr('meta/a.txt')))"`)).stdout.trim()).toBe(
      "['user.e2b.owner', 'user.e2b.step']",
    );
    await sbx.files.write('meta/b.txt', 'y');
    const listed = Object.fromEntries((await sbx.files.list('meta')).map((e) => [e.name, e.metadata]));
    expect(listed).toEqual({ 'a.txt': { owner: 'rl', step: '7' }, 'b.txt': undefined });
    await sbx.files.write('meta/a.txt', 'x2', { metadata: { step: '8' } });
    expect((await sbx.files.getInfo('meta/a.txt')).metadata).toEqual({ step: '8' });
    await sbx.files.write('meta/a.txt', 'x3');
    expect((await sbx.files.getInfo('meta/a.txt')).metadata).toBeUndefined();
  });

  it.each([
    [{ 'x-metadata-owner': ['rl', 'second'], 'content-type': ['x'] }, { owner: 'rl' }],
    [{ 'x-metadata-': ['ignored'] }, {}],
    [{ 'X-Metadata-Step': ['7'] }, { step: '7' }],
  ])('takes metadata from headers %j', (h, want) => expect(metadataOf(h)).toEqual(want));

  it.each([
    [{ 'x-metadata-k': ['caf\u00e9'] }, /printable ASCII/],
    [{ [`x-metadata-${'k'.repeat(247)}`]: ['v'] }, /longer than 246 bytes/],
    [{ 'x-metadata-a': ['v'.repeat(4090)] }, /at most 4096/],
  ])('refuses metadata headers %#', (h, msg) => expect(() => metadataOf(h)).toThrow(msg));

  it('refuses metadata past the size envd allows', async () => {
    await expect(sbx.files.write('meta/big.txt', 'x', { metadata: { big: 'v'.repeat(5000) } })).rejects.toThrow(/at most 4096/);
  });
});

describe('getInfo', () => {
  it('reports lifecycle and network even when the create named neither', async () => {
    const info = await sbx.getInfo();
    expect(info.lifecycle).toEqual({ onTimeout: 'kill', autoResume: false });
    expect(info.network).toMatchObject({ allowOut: [], denyOut: [], allowPublicTraffic: true });
  });
});

describe('options cubed cannot honour are refused, not ignored', () => {
  it('pause({ keepMemory: false }) leaves the sandbox running', async () => {
    const e = await sbx.pause({ keepMemory: false }).catch((x: unknown) => x);
    expect(e).toBeInstanceOf(SandboxError);
    expect((e as Error).message).toMatch(/^400: .*pause without memory is not supported/);
    expect((await sbx.getInfo()).state).toBe('running');
  });

  it("connect({ onResume: 'reboot' })", async () => {
    const e = await Sandbox.connect(sbx.sandboxId, { ...opts, onResume: 'reboot' }).catch((x: unknown) => x);
    expect(e).toBeInstanceOf(SandboxError);
    expect((e as Error).message).toMatch(/^400: .*resume without memory is not supported/);
  });

  it('the MCP gateway: refused before any sandbox is made', async () => {
    const before = (await Sandbox.list(opts).nextItems()).length;
    const e = await Sandbox.create({ ...opts, mcp: { 'github/acme/tools': { runCmd: 'tools --stdio' } } }).catch((x: unknown) => x);
    expect(e).toBeInstanceOf(SandboxError);
    expect((e as Error).message).toMatch(/^400: .*the MCP gateway .* is not supported/);
    expect((await Sandbox.list(opts).nextItems()).length).toBe(before);
  });

  it('the secrets API: a not-found on each of its calls, saying it is not implemented where the SDK shows our message', async () => {
    const said = /cubed does not implement E2B's secrets API \((POST|GET) \/secrets\)/;
    const failed = async (call: () => Promise<unknown>): Promise<Error> => {
      const e = await call().catch((x: unknown) => x);
      expect(e).toBeInstanceOf(SecretError);
      return e as Error;
    };
    expect((await failed(() => Secret.create('token', 'v', opts))).message).toMatch(said);
    expect((await failed(() => Secret.list(opts).nextItems())).message).toMatch(said);
    // For one secret the SDK puts its own words on a 404 (SecretNotFoundError).
    expect((await failed(() => Secret.getInfo('token', opts))).message).toBe('Secret token not found');
    expect((await failed(() => Secret.update('token', 'w', opts))).message).toBe('Secret token not found');
  });
});

describe('metrics', () => {
  const stats = (cpuUsageNs: number) => ({
    memoryBytes: 10,
    memoryLimitBytes: 100,
    cpuUsageNs,
    pids: 1,
    oomKills: 0,
    memoryCacheBytes: 4,
    diskUsedBytes: 4096,
  });
  it('one sample from two readings: CPU over the interval, cache and disk as read', () => {
    // 1 s of wall time, 0.5 s of CPU on a 1-vCPU sandbox: 50%.
    expect(metricOf({ at: 1_000_000, cpuUsageNs: 0 }, stats(5e8), 1_001_000, { cpus: 1, diskGiB: 1 })).toEqual({
      timestamp: new Date(1_001_000).toISOString(),
      timestampUnix: 1001,
      cpuCount: 1,
      cpuUsedPct: 50,
      memUsed: 10,
      memTotal: 100,
      memCache: 4,
      diskUsed: 4096,
      diskTotal: 1024 ** 3,
    });
  });
  it('filters by [start, end] in unix seconds', () => {
    const m = (t: number) => metricOf({ at: 0, cpuUsageNs: 0 }, stats(0), t * 1000, { cpus: 1, diskGiB: 1 });
    const all = [m(10), m(15), m(20)];
    expect(within(all).length).toBe(3);
    expect(within(all, 15).map((x) => x.timestampUnix)).toEqual([15, 20]);
    expect(within(all, 11, 19).map((x) => x.timestampUnix)).toEqual([15]);
  });

  it('getMetrics keeps a history with memCache and diskUsed, and honours start/end', async () => {
    await sbx.files.write('blob.bin', 'x'.repeat(1 << 20));
    // diskUsed is the quota group's figure, which btrfs updates at its commit (every 30 s): sync commits now.
    await sbx.commands.run('sync');
    const first = await sbx.getMetrics();
    expect(first.length).toBeGreaterThanOrEqual(1);
    // The next sample (every 5 s), polled for instead of slept for.
    let later = first;
    for (let i = 0; i < 60 && later.length < 2; i++) {
      await new Promise((r) => setTimeout(r, 250));
      later = await sbx.getMetrics();
    }
    expect(later.length).toBeGreaterThanOrEqual(2);
    const last = later.at(-1)!;
    expect(last.memCache).toBeTypeOf('number');
    expect(last.diskUsed).toBeGreaterThanOrEqual(1 << 20);
    expect(last.diskTotal).toBeGreaterThan(last.diskUsed);
    expect(await sbx.getMetrics({ start: new Date(Date.now() + 3_600_000) })).toEqual([]);
    expect(await sbx.getMetrics({ end: new Date(later[0]!.timestamp.getTime()) })).toHaveLength(1);
  });
});

describe('the e2b CLI', () => {
  const cli = (...args: string[]) =>
    execa('node', ['node_modules/@e2b/cli/dist/index.js', ...args], {
      env: { E2B_API_KEY: d.apiKey, E2B_API_URL: d.url, E2B_SANDBOX_URL: d.url, NO_COLOR: '1' },
      reject: false,
      timeout: 60_000,
    });

  it('sandbox logs shows the lifecycle events and what its processes printed', async () => {
    await sbx.commands.run('echo out-line-1; echo err-line >&2; printf no-newline; exit 3').catch(() => undefined);
    const r = await cli('sandbox', 'logs', sbx.sandboxId);
    expect(r.exitCode, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/sandbox\.created/);
    for (const line of ['out-line-1', 'err-line', 'no-newline', 'exit code 3']) expect(r.stdout).toContain(line);
    expect(r.stdout.indexOf('sandbox.created')).toBeLessThan(r.stdout.indexOf('out-line-1'));
  });

  it('snapshot list answers (empty), not 404', async () => {
    const r = await cli('sandbox', 'snapshot', 'list');
    expect(r.exitCode, r.stderr).toBe(0);
  });
});
