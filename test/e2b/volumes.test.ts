// E2B volumes with the real `e2b` SDK, unchanged: Volume.create/list/getInfo/destroy, the volume
// content API (its own token, at E2B_VOLUME_API_URL), and volumeMounts at create: a subvolume of
// the node's store with a size limit, mounted idmapped into ns sandboxes, several at once, kept
// when they end.
import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Sandbox, Volume, VolumeError, VolumePathNotFoundError } from 'e2b';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cubectl } from '../cli/run-cli.js';
import { call, startDaemon, type TestDaemon } from '../helpers/daemon.js';
import { sdkClient, type SdkClient } from '../helpers/sdk.js';

let d: TestDaemon;
let sdk: SdkClient;
const volumeDir = (id: string) => join(d.dataDir, 'store', 'volumes', id);
const mountsOf = (sbx: Sandbox) => sbx.commands.run('cat /proc/self/mounts').then((r) => r.stdout);

beforeAll(async () => {
  d = await startDaemon();
  sdk = sdkClient(d);
  // The content API is this server too (the SDK's default is https://api.<domain>).
  process.env.E2B_VOLUME_API_URL = d.url;
});

afterAll(async () => {
  try {
    await sdk?.killAll();
    // Every volume a test made, even one a failed test left.
    for (const v of d ? await Volume.list(sdk.opts) : []) await Volume.destroy(v.volumeId, sdk.opts);
  } finally {
    delete process.env.E2B_VOLUME_API_URL;
    await d?.stop();
  }
});

describe('the volume API', () => {
  it('creates, lists, gets and deletes; names are unique per key; the subvolume goes with the delete', async () => {
    const vol = await Volume.create('vt-crud', sdk.opts);
    expect(vol.volumeId).toMatch(/^vol-[a-z0-9]{16}$/);
    expect(vol.name).toBe('vt-crud');
    expect(vol.token.length).toBeGreaterThan(20);
    expect(existsSync(volumeDir(vol.volumeId))).toBe(true);
    expect((await Volume.list(sdk.opts)).map((v) => v.name)).toContain('vt-crud');
    const info = await Volume.getInfo(vol.volumeId, sdk.opts);
    expect(info).toMatchObject({ volumeId: vol.volumeId, name: 'vt-crud', token: vol.token });
    const again = await Volume.create('vt-crud', sdk.opts).catch((e: unknown) => e);
    expect(again).toBeInstanceOf(VolumeError);
    expect((again as Error).message).toMatch(/taken/);
    expect(await Volume.destroy(vol.volumeId, sdk.opts)).toBe(true);
    expect(existsSync(volumeDir(vol.volumeId))).toBe(false);
    expect(await Volume.destroy(vol.volumeId, sdk.opts)).toBe(false);
    await expect(Volume.getInfo(vol.volumeId, sdk.opts)).rejects.toThrow(/not found/);
  });

  it('the content API: write, read, list, stat, make dirs, metadata and remove; a wrong token is refused', async () => {
    const vol = await Volume.create('vt-files', sdk.opts);
    const w = await vol.writeFile('/notes/a.txt', 'hello volume\n');
    expect(w).toMatchObject({ name: 'a.txt', path: '/notes/a.txt', type: 'file', size: 13, uid: 1000, gid: 1000 });
    expect(await vol.readFile('/notes/a.txt')).toBe('hello volume\n');
    expect(await vol.readFile('notes/a.txt')).toBe('hello volume\n'); // relative to the volume's root
    await expect(vol.makeDir('/x/y')).rejects.toBeInstanceOf(VolumePathNotFoundError);
    expect(await vol.makeDir('/x/y', { force: true })).toMatchObject({ path: '/x/y', type: 'directory' });
    expect((await vol.list('/')).map((e) => e.path)).toEqual(['/notes', '/x']);
    expect((await vol.list('/', { depth: 3 })).map((e) => e.path)).toEqual(['/notes', '/notes/a.txt', '/x', '/x/y']);
    const st = await vol.getInfo('/notes/a.txt');
    expect(st.mtime).toBeInstanceOf(Date);
    expect(await vol.updateMetadata('/notes/a.txt', { mode: 0o600, uid: 0 })).toMatchObject({ mode: 0o600, uid: 0 });
    await vol.remove('/notes');
    expect(await vol.exists('/notes/a.txt')).toBe(false);
    await expect(vol.readFile('/nope')).rejects.toBeInstanceOf(VolumePathNotFoundError);
    // The content API takes the volume's token, not an API key, and not another volume's token.
    const other = await Volume.create('vt-files-other', sdk.opts);
    const res = await fetch(`${d.url}/volumecontent/${vol.volumeId}/path?path=/x`, { headers: { authorization: `Bearer ${other.token}` } });
    expect(res.status).toBe(401);
    const byKey = await fetch(`${d.url}/volumecontent/${vol.volumeId}/path?path=/x`, { headers: { 'x-api-key': d.apiKey } });
    expect(byKey.status).toBe(401);
    // A flood of wrong tokens is answered 429 past api.auth_failures_per_sec (20); the right one still works.
    const codes = await Promise.all(
      Array.from({ length: 100 }, () =>
        fetch(`${d.url}/volumecontent/${vol.volumeId}/path?path=/x`, { headers: { authorization: 'Bearer wrong' } }).then((r) => r.status),
      ),
    );
    expect(codes).toContain(429);
    expect(codes.every((c) => c === 401 || c === 429)).toBe(true);
    expect((await vol.getInfo('/x')).type).toBe('directory');
    await Volume.destroy(other.volumeId, sdk.opts);
    await Volume.destroy(vol.volumeId, sdk.opts);
  });

  it('no path or link leads out of the volume', async () => {
    const vol = await Volume.create('vt-escape', sdk.opts);
    await expect(vol.readFile('../../../../etc/passwd')).rejects.toThrow(/400.*'\.\.'/);
    // Links made inside (as a sandbox could): an absolute one resolves inside the volume, one
    // climbing above its root is refused; neither reaches the host's /etc.
    const sbx = await sdk.create('host', { volumeMounts: { '/data': 'vt-escape' } });
    await sbx.commands.run('ln -s /etc /data/abs && ln -s ../../../../../../etc/passwd /data/up');
    await expect(vol.readFile('/abs/passwd')).rejects.toBeInstanceOf(VolumePathNotFoundError);
    await expect(vol.readFile('/up')).rejects.toThrow(/leads out of volume/);
    await expect(vol.writeFile('/abs/passwd', 'x')).resolves.toMatchObject({ path: '/etc/passwd' }); // /etc of the volume
    expect(readFileSync(join(volumeDir(vol.volumeId), 'etc', 'passwd'), 'utf8')).toBe('x');
    expect(readFileSync('/etc/passwd', 'utf8')).not.toBe('x');
    await sbx.kill();
    await Volume.destroy(vol.volumeId, sdk.opts);
  });

  it('a write over the size limit fails with 413, and the volume stays usable', async () => {
    // Our extension of the create body: its size (absent: volumes.default_gib).
    const made = await call(d, 'POST', '/volumes', { name: 'vt-small', sizeGiB: 0.0625 });
    expect(made.status).toBe(201);
    const vol = await Volume.connect(made.json.volumeID as string, sdk.opts);
    const e = await vol.writeFile('/big.bin', new ArrayBuffer(100 * 1024 * 1024)).catch((x: unknown) => x);
    expect(e).toBeInstanceOf(VolumeError);
    expect((e as Error).message).toMatch(/413.*full/);
    await vol.remove('/big.bin');
    expect((await vol.writeFile('/small.txt', 'fits')).size).toBe(4);
    await Volume.destroy(vol.volumeId, sdk.opts);
  });
});

describe('volumeMounts at create', () => {
  it('two sandboxes mount one volume at once; files outlive both; a mounted volume is not deleted', async () => {
    const vol = await Volume.create('vt-shared', sdk.opts);
    await vol.writeFile('/from-api.txt', 'written through the API\n');
    const a = await sdk.create('host', { volumeMounts: { '/data': vol } });
    const b = await sdk.create('host', { volumeMounts: { '/mnt/shared': 'vt-shared' } });
    expect((await a.getInfo()).volumeMounts).toEqual([{ name: 'vt-shared', path: '/data' }]);
    const line = (await mountsOf(a)).split('\n').find((l) => l.split(' ')[1] === '/data');
    expect(line).toMatch(/nosuid/);
    expect(line).toMatch(/nodev/);
    // Each sandbox has host ids of its own; the volume's files are its `user`'s in both.
    expect((await a.commands.run('cat /data/from-api.txt && id -u && stat -c %u /data/from-api.txt')).stdout).toBe('written through the API\n1000\n1000\n');
    // df as `user`: the volume's limit (volumes.default_gib, 1 GiB), not the node's store.
    expect((await a.commands.run('df -B1 --output=size /data | tail -1')).stdout.trim()).toBe(String(1024 ** 3));
    await a.commands.run('echo from a > /data/a.txt');
    expect((await b.commands.run('cat /mnt/shared/a.txt && stat -c %U /mnt/shared/a.txt')).stdout).toBe('from a\nuser\n');
    await b.commands.run('echo from b >> /mnt/shared/a.txt');
    expect(await a.files.read('/data/a.txt')).toBe('from a\nfrom b\n');

    const busy = await Volume.destroy(vol.volumeId, sdk.opts).catch((x: unknown) => x);
    expect(busy).toBeInstanceOf(VolumeError);
    expect((busy as Error).message).toMatch(/409.*mounted by 2 sandboxes/);

    await a.kill();
    await b.kill();
    expect(await vol.readFile('/a.txt')).toBe('from a\nfrom b\n');
    const c = await sdk.create('host', { volumeMounts: { '/data': 'vt-shared' } });
    expect((await c.commands.run('cat /data/a.txt')).stdout).toBe('from a\nfrom b\n');
    await c.kill();
    expect(await Volume.destroy(vol.volumeId, sdk.opts)).toBe(true);
    expect(existsSync(volumeDir(vol.volumeId))).toBe(false);
  });

  it('a volume survives a daemon restart; one on disk that no record names is removed at the start', async () => {
    const vol = await Volume.create('vt-restart', sdk.opts);
    await vol.writeFile('/kept.txt', 'kept');
    // What a create cut short between the node and the store would leave.
    mkdirSync(volumeDir('vol-stray00000000000'));
    await d.restart();
    expect(await vol.readFile('/kept.txt')).toBe('kept');
    expect(existsSync(volumeDir('vol-stray00000000000'))).toBe(false);
    await Volume.destroy(vol.volumeId, sdk.opts);
  });

  it('refuses an unknown volume, a bad path and a path the sandbox mounts itself', async () => {
    const unknown = await Sandbox.create('host', { ...sdk.opts, volumeMounts: { '/data': 'vt-nope' } }).catch((x: unknown) => x);
    expect((unknown as Error).message).toMatch(/404.*volume "vt-nope" not found/);
    const vol = await Volume.create('vt-paths', sdk.opts);
    for (const [path, why] of [
      ['data', /must be absolute/],
      ['/a/../b', /must be absolute/],
      ['/proc/x', /under \/proc/],
      ['/tmp', /under \/tmp/],
    ] as const) {
      const e = await Sandbox.create('host', { ...sdk.opts, volumeMounts: { [path]: 'vt-paths' } }).catch((x: unknown) => x);
      expect((e as Error).message).toMatch(/400/);
      expect((e as Error).message).toMatch(why);
    }
    // /bin leads to the host's /usr/bin, mounted read-only in the host template.
    const ro = await Sandbox.create('host', { ...sdk.opts, volumeMounts: { '/bin/vt-paths': 'vt-paths' } }).catch((x: unknown) => x);
    expect((ro as Error).message).toMatch(/400: .*the mount point \/bin\/vt-paths cannot be made in this sandbox: Read-only file system/);
    expect(existsSync('/usr/bin/vt-paths')).toBe(false);
    expect((await Sandbox.list(sdk.opts).nextItems()).length).toBe(0);
    await Volume.destroy(vol.volumeId, sdk.opts);
  });

  it("a mount point behind a sandbox's own symlinks is made inside it, never on the host", async () => {
    const vol = await Volume.create('vt-links', sdk.opts);
    await vol.writeFile('/marker', 'in the volume');
    // A snapshot whose layer holds an absolute link to /etc and one climbing past the root.
    const a = await sdk.create('host');
    await a.commands.run('ln -s /etc /home/user/evil && ln -s ../../../../../../.. /home/user/up');
    const snap = await a.createSnapshot();
    const b = await sdk.create(snap.snapshotId, { volumeMounts: { '/home/user/evil/cube-vt-links': 'vt-links', '/home/user/up/cube-vt-up': 'vt-links' } });
    expect((await b.commands.run('cat /etc/cube-vt-links/marker /cube-vt-up/marker')).stdout).toBe('in the volumein the volume');
    expect(existsSync('/etc/cube-vt-links')).toBe(false);
    expect(existsSync('/cube-vt-up')).toBe(false);
    await b.kill();
    await a.kill();
    await Sandbox.deleteSnapshot(snap.snapshotId, sdk.opts);
    await Volume.destroy(vol.volumeId, sdk.opts);
  });
});

describe('cubectl volume', () => {
  it('create, ls, get (size used, who mounts it), rm refused while mounted, rm; --json', async () => {
    const created = await cubectl(['volume', 'create', 'vt-cli', '--size', '0.5', '--json'], sdk.env);
    expect(created.code).toBe(0);
    const v = JSON.parse(created.stdout) as { volumeID: string; sizeBytes: number; nodeID: string; token?: string };
    expect(v).toMatchObject({ sizeBytes: 512 * 1024 ** 2, nodeID: d.nodeID });
    expect(v.token).toBeUndefined();
    expect((await cubectl(['volume', 'ls'], sdk.env)).stdout).toMatch(new RegExp(`${v.volumeID}\\s+vt-cli\\s+.*0\\.5 GiB`));
    const sbx = await sdk.create('host', { volumeMounts: { '/data': 'vt-cli' } });
    // Quota groups count at a transaction commit: synced here rather than waiting for btrfs's 30 s.
    await sbx.commands.run('head -c 3000000 /dev/urandom > /data/z && sync -f /data/z');
    const got = JSON.parse((await cubectl(['volume', 'get', 'vt-cli', '--json'], sdk.env)).stdout) as { mountedBy: string[]; usedBytes: number; token: string };
    expect(got.mountedBy).toEqual([sbx.sandboxId]);
    expect(got.usedBytes).toBeGreaterThan(3_000_000);
    expect(got.token.length).toBeGreaterThan(20);
    const busy = await cubectl(['volume', 'rm', 'vt-cli'], sdk.env);
    expect(busy.code).not.toBe(0);
    expect(busy.stderr).toMatch(/130430.*mounted by 1 sandbox \(/);
    await sbx.kill();
    const rm = await cubectl(['volume', 'rm', 'vt-cli', '--json'], sdk.env);
    expect(JSON.parse(rm.stdout)).toEqual([{ volume: 'vt-cli', removed: true }]);
    expect(existsSync(volumeDir(v.volumeID))).toBe(false);
  });
});
