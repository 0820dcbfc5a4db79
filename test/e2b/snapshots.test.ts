// E2B snapshots and fork with the real `e2b` SDK, unchanged: an ns snapshot keeps the sandbox's
// writable layer (files), not its processes; sandboxes made from it are independent copies.
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { execa } from 'execa';
import { RateLimitError, Sandbox, SandboxError, SandboxNotFoundError } from 'e2b';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cubectl } from '../cli/run-cli.js';
import { call, startDaemon, type TestDaemon } from '../helpers/daemon.js';

let d: TestDaemon;
let opts: { apiKey: string; apiUrl: string; sandboxUrl: string };
const made: Sandbox[] = [];

async function create(template?: string): Promise<Sandbox> {
  const s = template === undefined ? await Sandbox.create({ ...opts, timeoutMs: 300_000 }) : await Sandbox.create(template, { ...opts, timeoutMs: 300_000 });
  made.push(s);
  return s;
}

const snapshotsOnDisk = () => readdirSync(join(d.dataDir, 'store', 'snapshots')).sort();
const subvolumesOnDisk = () => readdirSync(join(d.dataDir, 'store', 'sandboxes')).sort();

beforeAll(async () => {
  d = await startDaemon();
  opts = { apiKey: d.apiKey, apiUrl: d.url, sandboxUrl: d.url };
});

afterAll(async () => {
  try {
    await Promise.allSettled(made.map((s) => s.kill()));
    for (const s of (await call(d, 'GET', '/snapshots')).json as { snapshotID: string }[]) await Sandbox.deleteSnapshot(s.snapshotID, opts);
  } finally {
    await d?.stop();
  }
});

describe('snapshot and create from it', () => {
  let origin: Sandbox;
  let snapshotId: string;

  beforeAll(async () => {
    origin = await create();
    await origin.files.write('/home/user/state.txt', 'before the snapshot\n');
    await origin.commands.run('sleep 600', { background: true });
  });

  it('keeps the files, says processes are not kept, and leaves the origin running', async () => {
    const snap = await origin.createSnapshot({ name: 'with-state' });
    snapshotId = snap.snapshotId;
    expect(snap.names).toEqual(['with-state']);
    expect(snapshotsOnDisk()).toEqual([snapshotId]);
    const raw = (await call(d, 'GET', `/snapshots?sandboxID=${origin.sandboxId}`)).json as Record<string, unknown>[];
    expect(raw).toMatchObject([{ snapshotID: snapshotId, runtime: 'ns', keeps: 'filesystem', processesKept: false }]);
    expect(await origin.isRunning()).toBe(true);
    expect((await origin.commands.list()).some((p) => JSON.stringify(p).includes('sleep 600'))).toBe(true);
  });

  it('a sandbox made from it sees the file; later writes on either side stay on that side', async () => {
    await origin.files.write('/home/user/state.txt', 'origin, after\n');
    const copy = await create(snapshotId);
    expect(copy.sandboxId).not.toBe(origin.sandboxId);
    expect(await copy.files.read('/home/user/state.txt')).toBe('before the snapshot\n');
    // Processes are not kept: the copy has none of the origin's.
    expect((await copy.commands.list()).some((p) => JSON.stringify(p).includes('sleep 600'))).toBe(false);
    await copy.files.write('/home/user/state.txt', 'copy, after\n');
    await copy.files.write('/home/user/only-copy.txt', 'x');
    expect(await origin.files.read('/home/user/state.txt')).toBe('origin, after\n');
    expect(await origin.files.exists('/home/user/only-copy.txt')).toBe(false);
    expect((await copy.getInfo()).templateId).toBe((await origin.getInfo()).templateId);
  });

  it('lists by sandbox and by name, pages, and deletes while a sandbox made from it runs', async () => {
    const second = await origin.createSnapshot();
    expect(second.names).toEqual([]);
    const mine = await origin.listSnapshots().nextItems();
    expect(mine.map((s) => s.snapshotId)).toEqual([snapshotId, second.snapshotId]);
    expect((await Sandbox.listSnapshots({ ...opts, name: 'with-state' }).nextItems()).map((s) => s.snapshotId)).toEqual([snapshotId]);
    const pager = Sandbox.listSnapshots({ ...opts, limit: 1 });
    expect((await pager.nextItems()).map((s) => s.snapshotId)).toEqual([snapshotId]);
    expect(pager.hasNext).toBe(true);
    expect((await pager.nextItems()).map((s) => s.snapshotId)).toEqual([second.snapshotId]);
    expect(pager.hasNext).toBe(false);

    const copy = await create(second.snapshotId);
    expect(await Sandbox.deleteSnapshot(second.snapshotId, opts)).toBe(true);
    expect(await Sandbox.deleteSnapshot(second.snapshotId, opts)).toBe(false);
    expect(snapshotsOnDisk()).toEqual([snapshotId]);
    expect(await copy.files.read('/home/user/state.txt')).toBe('origin, after\n');
    // A create from a deleted snapshot: 404 naming it.
    const e = await Sandbox.create(second.snapshotId, opts).catch((x: unknown) => x);
    expect(e).toBeInstanceOf(SandboxError);
    expect((e as Error).message).toMatch(/^404: .*snapshot snap-\w+ not found/);
  });

  it('a name can be deleted by, and is not given twice', async () => {
    const e = await origin.createSnapshot({ name: 'with-state' }).catch((x: unknown) => x);
    expect((e as Error).message).toMatch(/^409: .*snapshot name with-state is taken/);
    const bad = await origin.createSnapshot({ name: '../x' }).catch((x: unknown) => x);
    expect((bad as Error).message).toMatch(/^400: /);
    // A template's name is refused: Sandbox.create(name) finds the template first.
    const tpl = await origin.createSnapshot({ name: 'host' }).catch((x: unknown) => x);
    expect((tpl as Error).message).toMatch(/^409: .*snapshot name host is a template's name/);
  });

  it('Sandbox.create(name) starts from the snapshot of that name; an unknown name is still 404', async () => {
    const copy = await create('with-state');
    expect(await copy.files.read('/home/user/state.txt')).toBe('before the snapshot\n');
    expect((await copy.getInfo()).templateId).toBe((await origin.getInfo()).templateId);
    const e = await Sandbox.create('no-such-snapshot', opts).catch((x: unknown) => x);
    expect(e).toBeInstanceOf(SandboxError);
    expect((e as Error).message).toMatch(/^404: .*template no-such-snapshot not found/);
  });
});

describe('refusals', () => {
  it('a snapshot of an unknown sandbox is SandboxNotFoundError; delete of an unknown snapshot is false', async () => {
    await expect(Sandbox.createSnapshot('nosuchsandbox0000000', opts)).rejects.toBeInstanceOf(SandboxNotFoundError);
    expect(await Sandbox.deleteSnapshot('snap-0000000000000000', opts)).toBe(false);
    const r = await call(d, 'DELETE', '/templates/snap-0000000000000000');
    expect(r.status).toBe(404);
    expect(r.json).toMatchObject({ code: 404, message: expect.stringMatching(/snapshot or template 'snap-0000000000000000' not found/) });
  });
});

describe('paused sandboxes', () => {
  it('are snapshotted as they are and stay paused', async () => {
    const s = await create();
    await s.files.write('/home/user/p.txt', 'paused state');
    await s.pause();
    const snap = await Sandbox.createSnapshot(s.sandboxId, opts);
    expect((await s.getInfo()).state).toBe('paused');
    const copy = await create(snap.snapshotId);
    expect(await copy.files.read('/home/user/p.txt')).toBe('paused state');
    await Sandbox.connect(s.sandboxId, opts);
    expect(await s.files.read('/home/user/p.txt')).toBe('paused state');
    expect(await Sandbox.deleteSnapshot(snap.snapshotId, opts)).toBe(true);
  });
});

describe('fork', () => {
  it('makes N sandboxes with the origin files and leaves no snapshot behind', async () => {
    const origin = await create();
    await origin.files.write('/home/user/f.txt', 'fork me');
    const before = snapshotsOnDisk();
    const forks = await origin.fork({ count: 3 });
    expect(forks).toHaveLength(3);
    for (const f of forks) {
      expect(f).toBeInstanceOf(Sandbox);
      const s = f as Sandbox;
      made.push(s);
      expect(await s.files.read('/home/user/f.txt')).toBe('fork me');
    }
    expect(new Set(forks.map((f) => (f as Sandbox).sandboxId)).size).toBe(3);
    expect(snapshotsOnDisk()).toEqual(before);
    const bad = await origin.fork({ count: 0 }).catch((x: unknown) => x);
    expect((bad as Error).message).toMatch(/^400: .*fork count must be an integer from 1/);
  });

  it('is refused whole (429) when its sandboxes would pass api.max_sandboxes_per_key', async () => {
    const origin = await create();
    const cfg = (await call(d, 'GET', '/admin/v1/config')).json as { master: { api: { max_sandboxes_per_key: number } } };
    const before = cfg.master.api.max_sandboxes_per_key;
    const running = ((await call(d, 'GET', '/admin/v1/sandboxes?state=running')).json as unknown[]).length;
    expect((await call(d, 'PUT', '/admin/v1/config', { path: 'api.max_sandboxes_per_key', value: running + 2 })).status).toBe(200);
    try {
      const e = await origin.fork({ count: 3 }).catch((x: unknown) => x);
      expect(e).toBeInstanceOf(RateLimitError);
      expect((e as Error).message).toMatch(/\+ 3 asked, at most \d+ \(api\.max_sandboxes_per_key, the default/);
      expect(((await call(d, 'GET', '/admin/v1/sandboxes?state=running')).json as unknown[]).length).toBe(running);
    } finally {
      await call(d, 'PUT', '/admin/v1/config', { path: 'api.max_sandboxes_per_key', value: before });
    }
  });
});

describe('disk limit', () => {
  it('is enforced in a sandbox made from a snapshot, counting its own writes only', async () => {
    const origin = await create();
    // 200 MiB in the origin: shared with the copy, not counted against its 1 GiB limit.
    await origin.commands.run('head -c 200M /dev/zero > /home/user/big');
    const snap = await origin.createSnapshot();
    const copy = await create(snap.snapshotId);
    const r = await copy.commands
      .run('head -c 2G /dev/zero > /home/user/fill; echo rc=$?', { timeoutMs: 120_000 })
      .catch((e: { stdout?: string; stderr?: string }) => e);
    expect(`${r.stdout ?? ''}${r.stderr ?? ''}`).toMatch(/Disk quota exceeded|No space left/);
    const used = Number((await copy.commands.run('stat -c %s /home/user/fill')).stdout.trim());
    expect(used).toBeLessThan(1.1 * 1024 ** 3);
    expect(used).toBeGreaterThan(0.5 * 1024 ** 3);
    expect((await copy.commands.run('stat -c %s /home/user/big')).stdout.trim()).toBe(String(200 * 1024 ** 2));
    expect(await Sandbox.deleteSnapshot(snap.snapshotId, opts)).toBe(true);
  });
});

describe('a daemon killed mid-snapshot', () => {
  it('leaves no stray snapshot: what has no record is swept at start', async () => {
    const s = await create();
    // Fire snapshots and kill -9 while they are in flight: whichever were taken on disk but
    // not recorded are removed at the next start; recorded ones stay listed and on disk.
    const inflight = Array.from({ length: 5 }, () => Sandbox.createSnapshot(s.sandboxId, opts).catch(() => undefined));
    await new Promise((r) => setTimeout(r, 5));
    await d.kill9();
    await Promise.all(inflight);
    // And one certainly unrecorded: taken on disk while the daemon is down, as a kill between the
    // node's snapshot and the record's write leaves it.
    await execa('btrfs', [
      'subvolume',
      'snapshot',
      '-r',
      join(d.dataDir, 'store', 'sandboxes', s.sandboxId),
      join(d.dataDir, 'store', 'snapshots', 'snap-unrecorded00000'),
    ]);
    await d.restart();
    const listed = ((await call(d, 'GET', '/snapshots')).json as { snapshotID: string }[]).map((x) => x.snapshotID).sort();
    expect(listed).not.toContain('snap-unrecorded00000');
    expect(snapshotsOnDisk().filter((id) => !listed.includes(id))).toEqual([]);
    expect(listed.filter((id) => !snapshotsOnDisk().includes(id))).toEqual([]);
    const fromHere = ((await call(d, 'GET', `/snapshots?sandboxID=${s.sandboxId}`)).json as { snapshotID: string }[]).map((x) => x.snapshotID);
    for (const id of fromHere) expect(await Sandbox.deleteSnapshot(id, opts)).toBe(true);
    expect(subvolumesOnDisk()).toContain(s.sandboxId);
  });
});

describe('cubectl and the e2b CLI', () => {
  const env = () => ({ CUBE_API_URL: d.url, CUBE_API_KEY: d.apiKey });
  const e2b = (...args: string[]) =>
    execa('node', ['node_modules/@e2b/cli/dist/index.js', ...args], {
      env: { E2B_API_KEY: d.apiKey, E2B_API_URL: d.url, E2B_SANDBOX_URL: d.url, NO_COLOR: '1' },
      reject: false,
      timeout: 60_000,
    });

  it('sandbox snapshot, snapshot ls, sandbox create from it, sandbox fork, snapshot rm; --json; exit codes', async () => {
    const s = await create();
    await s.files.write('/home/user/cli.txt', 'from cubectl');
    const snap = await cubectl(['sandbox', 'snapshot', s.sandboxId, '--name', 'cli-snap'], env());
    expect(snap.code, snap.stderr).toBe(0);
    const id = snap.stdout.trim();
    expect(id).toMatch(/^snap-[a-z0-9]{16}$/);

    const ls = await cubectl(['snapshot', 'ls', '--sandbox', s.sandboxId], env());
    expect(ls.stdout).toMatch(new RegExp(`${id}\\s+cli-snap\\s+${s.sandboxId}\\s+\\S+\\s+\\S+\\s+ns\\s+filesystem`));
    const lsJson = JSON.parse((await cubectl(['snapshot', 'ls', '--name', 'cli-snap', '--json'], env())).stdout) as Record<string, unknown>[];
    expect(lsJson).toMatchObject([{ snapshotID: id, names: ['cli-snap'], keeps: 'filesystem' }]);
    expect(lsJson[0]).not.toHaveProperty('envVars');

    const byName = await cubectl(['sandbox', 'create', '--template', 'cli-snap'], env());
    expect(byName.code, byName.stderr).toBe(0);
    made.push(await Sandbox.connect(byName.stdout.trim(), opts));
    const fromId = await cubectl(['sandbox', 'create', '--template', id], env());
    expect(fromId.code, fromId.stderr).toBe(0);
    const copy = await Sandbox.connect(fromId.stdout.trim(), opts);
    made.push(copy);
    expect(await copy.files.read('/home/user/cli.txt')).toBe('from cubectl');

    const fork = await cubectl(['sandbox', 'fork', s.sandboxId, '-n', '2', '--json'], env());
    expect(fork.code, fork.stderr).toBe(0);
    const forks = JSON.parse(fork.stdout) as { sandbox: { sandboxID: string } }[];
    expect(forks).toHaveLength(2);
    for (const f of forks) made.push(await Sandbox.connect(f.sandbox.sandboxID, opts));

    const e2bList = await e2b('sandbox', 'snapshot', 'list', s.sandboxId);
    expect(e2bList.exitCode, e2bList.stderr).toBe(0);
    expect(e2bList.stdout).toContain(id);

    expect((await cubectl(['snapshot', 'rm', 'cli-snap'], env())).stdout).toBe('cli-snap removed\n');
    const again = await cubectl(['snapshot', 'rm', 'cli-snap'], env());
    expect(again.code).toBe(1);
    expect(again.stderr).toMatch(/snapshot cli-snap not found/);
    const gone = await cubectl(['sandbox', 'snapshot', 'nosuchsandbox0000000'], env());
    expect(gone.code).toBe(1);
    expect(gone.stderr.trim().split('\n')).toHaveLength(1);
    expect((await cubectl(['sandbox', 'fork', s.sandboxId, '-n', '0'], env())).code).toBe(2);
  });
});
