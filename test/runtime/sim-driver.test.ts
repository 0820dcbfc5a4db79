// The sim runtime driver (a SIMULATION: no kernel objects) honours the RuntimeDriver contract
// the cubelet relies on: lifecycle, exec of the simulated commands, confined files, stats,
// scan/cleanup; and its network agent hands out addresses without touching the kernel.
import { existsSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import type { SandboxMeta } from '../../src/cubelet/meta.js';
import { isCubeError } from '../../src/errors.js';
import { newSandboxID } from '../../src/ids.js';
import { SimDriver } from '../../src/runtime/sim/driver.js';
import { shellWords } from '../../src/runtime/sim/exec.js';
import { SimNetworkAgent } from '../../src/runtime/sim/network.js';
import type { ExecRequest, LaunchSpec, SandboxHandle } from '../../src/runtime/types.js';

const dataDir = mkdtempSync('/tmp/cubed-test-sim-');
afterAll(() => rmSync(dataDir, { recursive: true, force: true }));

const spec = (over: Partial<LaunchSpec> = {}): LaunchSpec => ({
  sandboxID: newSandboxID(),
  template: { name: 'host', layers: ['/(simulated)'], bindHostUsr: false },
  cpus: 1,
  memoryMiB: 256,
  pidsMax: 64,
  env: { GREETING: 'hi' },
  ...over,
});

async function run(d: SimDriver, h: SandboxHandle, req: ExecRequest, stdin?: string) {
  const p = d.exec(h, req);
  const out: Buffer[] = [];
  const err: Buffer[] = [];
  p.stdout.on('data', (b: Buffer) => out.push(b));
  p.stderr.on('data', (b: Buffer) => err.push(b));
  if (stdin !== undefined) p.stdin!.end(stdin);
  const exit = await p.exited;
  return { exit, stdout: Buffer.concat(out).toString(), stderr: Buffer.concat(err).toString() };
}

async function code(p: Promise<unknown>): Promise<number | undefined> {
  try {
    await p;
    return undefined;
  } catch (e) {
    return isCubeError(e) ? e.code : -1;
  }
}

describe('sim driver lifecycle', () => {
  it('create, pause, resume, destroy; alive follows; destroy is idempotent; nothing is made on disk', async () => {
    const d = new SimDriver({ dataDir });
    await d.init();
    const s = spec();
    const h = await d.create(s);
    expect(h.initPid).toBeLessThan(0); // never a host pid
    expect(existsSync(h.dir)).toBe(false);
    expect(d.alive(h)).toBe(true);
    expect(await code(d.create(s))).toBe(130409);
    await d.pause(h);
    expect(() => d.exec(h, { argv: ['true'] })).toThrow(/paused/);
    await d.resume(h);
    expect((await run(d, h, { argv: ['true'] })).exit.exitCode).toBe(0);
    expect((await d.scan()).map((x) => x.sandboxID)).toEqual([s.sandboxID]);
    await d.destroy(s.sandboxID);
    await d.destroy(s.sandboxID);
    expect(d.alive(h)).toBe(false);
    expect(existsSync(h.dir)).toBe(false);
    expect(await code(d.pause(h))).toBe(130404);
  });

  it('cleanup keeps what it is told to and removes every other sandbox and leftover directory', async () => {
    const d = new SimDriver({ dataDir: join(dataDir, 'cleanup') });
    await d.init();
    const [a, b, c] = [await d.create(spec()), await d.create(spec()), await d.create(spec())];
    // Directories an older version made (with its meta.json) and left behind.
    for (const h of [a, b]) mkdirSync(h.dir);
    const fresh = new SimDriver({ dataDir: join(dataDir, 'cleanup') }); // a restart: memory is empty, directories remain
    await fresh.init();
    expect(await fresh.scan()).toEqual([]);
    const { removed } = await fresh.cleanup(new Set([a.sandboxID]));
    expect(removed).toEqual([b.sandboxID]);
    expect(existsSync(a.dir)).toBe(true);
    expect(existsSync(b.dir)).toBe(false);
    expect((await d.cleanup(new Set())).removed.sort()).toEqual([a.sandboxID, b.sandboxID, c.sandboxID].sort());
    expect(existsSync(a.dir)).toBe(false);
  });

  it("keeps the cubelet's meta in memory, as a copy a later change of the object does not reach, until the sandbox is destroyed", async () => {
    const d = new SimDriver({ dataDir: join(dataDir, 'meta') });
    await d.init();
    const h = await d.create(spec());
    const keeper = d.metaKeeper<SandboxMeta>();
    expect(await keeper.read(h.dir)).toBeUndefined(); // before the cubelet's write: an incomplete create
    const meta: SandboxMeta = {
      sandboxID: h.sandboxID,
      templateID: 'host',
      spec: { cpus: 1, memoryMiB: 256, diskGiB: 1 },
      slotIndex: 3,
      startedAt: 1,
      endAt: 2,
      metadata: { k: 'v' },
      env: {},
      paused: false,
    };
    await keeper.write(h.dir, meta);
    meta.metadata.k = 'changed';
    meta.paused = true;
    expect(await keeper.read(h.dir)).toEqual({ ...meta, metadata: { k: 'v' }, paused: false });
    await d.destroy(h.sandboxID);
    expect(await keeper.read(h.dir)).toBeUndefined();
  });
});

describe('sim exec', () => {
  const d = new SimDriver({ dataDir: join(dataDir, 'exec') });
  const cases: { argv: string[]; stdin?: string; env?: Record<string, string>; cwd?: string; exit: number; stdout?: string; stderr?: RegExp }[] = [
    { argv: ['true'], exit: 0, stdout: '' },
    { argv: ['/bin/false'], exit: 1 },
    { argv: ['echo', 'hello', 'world'], exit: 0, stdout: 'hello world\n' },
    { argv: ['echo', '-n', 'x'], exit: 0, stdout: 'x' },
    { argv: ['sh', '-c', 'echo "a  b" c'], exit: 0, stdout: 'a  b c\n' },
    { argv: ['bash', '-c', 'exit 3'], exit: 3 },
    { argv: ['printenv', 'GREETING'], exit: 0, stdout: 'hi\n' },
    { argv: ['printenv', 'EXTRA'], env: { EXTRA: 'e' }, exit: 0, stdout: 'e\n' },
    { argv: ['printenv', 'NOPE'], exit: 1 },
    { argv: ['pwd'], exit: 0, stdout: '/home/user\n' },
    { argv: ['pwd'], cwd: '/tmp', exit: 0, stdout: '/tmp\n' },
    { argv: ['cat'], stdin: 'piped', exit: 0, stdout: 'piped' },
    { argv: ['sleep', 'x'], exit: 1, stderr: /invalid time/ },
    { argv: ['python3', '-V'], exit: 127, stderr: /not simulated/ },
    { argv: ['sh', '-c', 'echo a | wc -c'], exit: 127, stderr: /not simulated/ },
  ];
  it.each(cases)('$argv', async (c) => {
    await d.init();
    const h = await d.create(spec());
    try {
      const r = await run(d, h, { argv: c.argv, stdin: c.stdin !== undefined, ...(c.env ? { env: c.env } : {}), ...(c.cwd ? { cwd: c.cwd } : {}) }, c.stdin);
      expect(r.exit.exitCode).toBe(c.exit);
      if (c.stdout !== undefined) expect(r.stdout).toBe(c.stdout);
      if (c.stderr) expect(r.stderr).toMatch(c.stderr);
    } finally {
      await d.destroy(h.sandboxID);
    }
  });

  it('a timeout kills (SIGKILL, timedOut); kill ends a sleep; cat FILE reads the sandbox file', async () => {
    await d.init();
    const h = await d.create(spec());
    try {
      const t = await run(d, h, { argv: ['sleep', '30'], timeoutMs: 50 });
      expect(t.exit).toMatchObject({ exitCode: 137, signal: 'SIGKILL', timedOut: true });
      const p = d.exec(h, { argv: ['sleep', '30'] });
      p.kill('SIGTERM');
      expect(await p.exited).toMatchObject({ exitCode: 143, signal: 'SIGTERM', timedOut: false });
      await d.files.write(h, 'notes.txt', Buffer.from('from a file'));
      expect((await run(d, h, { argv: ['cat', 'notes.txt'] })).stdout).toBe('from a file');
      expect((await run(d, h, { argv: ['cat', '/nope'] })).exit.exitCode).toBe(1);
    } finally {
      await d.destroy(h.sandboxID);
    }
  });

  it('shellWords: quotes group, anything a shell would interpret is refused', () => {
    expect(shellWords(`echo 'a b' "c d" e`)).toEqual(['echo', 'a b', 'c d', 'e']);
    for (const line of ['a && b', 'a | b', 'echo $HOME', 'a > f', 'a; b', 'echo `x`']) expect(shellWords(line)).toBeUndefined();
  });
});

describe('sim files and stats', () => {
  it('write/read/stat/list/mkdir/move/remove with the ns runtime rules', async () => {
    const d = new SimDriver({ dataDir: join(dataDir, 'files') });
    await d.init();
    const h = await d.create(spec());
    try {
      const f = d.files;
      const st = await f.write(h, 'a/b/c.txt', Buffer.from('12345'));
      expect(st).toMatchObject({ path: '/home/user/a/b/c.txt', type: 'file', size: 5, uid: 1000 });
      expect((await f.stat(h, '/home/user/a')).type).toBe('dir');
      expect(Buffer.concat(await (await f.read(h, 'a/b/c.txt')).toArray()).toString()).toBe('12345');
      expect((await f.list(h, 'a')).map((x) => x.path)).toEqual(['/home/user/a/b']);
      expect((await f.list(h, 'a', 2)).map((x) => x.path)).toEqual(['/home/user/a/b', '/home/user/a/b/c.txt']);
      expect(await f.mkdir(h, '/tmp/x', 'root')).toBe(true);
      expect(await f.mkdir(h, '/tmp/x')).toBe(false);
      expect((await f.stat(h, '/tmp/x')).uid).toBe(0);
      expect((await f.move(h, 'a', '/tmp/x/moved')).path).toBe('/tmp/x/moved');
      expect((await f.stat(h, '/tmp/x/moved/b/c.txt')).size).toBe(5);
      await f.remove(h, '/tmp/x');
      const errors: [Promise<unknown>, number][] = [
        [f.stat(h, '/tmp/x/moved'), 130404],
        [f.read(h, '/tmp'), 130400],
        [f.stat(h, '../../etc/passwd'), 130400],
        [f.write(h, '/', Buffer.from('x')), 130400],
        [f.remove(h, '/'), 130400],
        [f.write(h, 'x', Buffer.from('x'), 'nobody'), 130400],
      ];
      for (const [p, want] of errors) expect(await code(p)).toBe(want);
      const s = await d.stats(h);
      expect(s.memoryLimitBytes).toBe(256 * 2 ** 20);
      expect(s.pids).toBe(1);
      const before = s.memoryBytes;
      await f.write(h, 'big', Buffer.alloc(1 << 20));
      expect((await d.stats(h)).memoryBytes - before).toBe(1 << 20);
    } finally {
      await d.destroy(h.sandboxID);
    }
  });
});

describe('sim network agent', () => {
  it('hands out distinct addresses from the range, takes re-adopted slots back, and reports levels', async () => {
    const n = new SimNetworkAgent({ nodeTag: 'ab12', cidr: '10.250.0.0/28' });
    await n.start(new Map([['kept', 1]]));
    expect(n.slotOf('kept')).toMatchObject({ index: 1, sandboxIp: '10.250.0.6', netnsPath: '' });
    const a = await n.acquire('a');
    const b = await n.acquire('b');
    expect([a.index, b.index]).toEqual([2, 3]);
    expect(await code(n.acquire('c'))).toBe(130547); // range exhausted, as on a real node
    expect(n.levels()).toMatchObject({ free: 0, inUse: 3, total: 3 });
    await n.release('a');
    await n.release('a');
    expect((await n.acquire('c')).index).toBe(2);
    await n.stop();
  });
});
