// The files API acts with the asking user's permissions inside the sandbox (issue 30 item 5),
// with the real `e2b` SDK unchanged: before, `files.write(path, data, { user: 'user' })` replaced
// a root-owned 0600 file and created files in /root, and reads, listings, stat, removes and
// renames ran as host root whatever the user (the daemon acts through /proc/<init>/root). Every
// operation as `user` now goes only where `user`'s own process could; root's stay unrestricted,
// and template builds (COPY, as Docker's) are not affected.
import { Sandbox } from 'e2b';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startDaemon, type TestDaemon } from '../helpers/daemon.js';

let d: TestDaemon;
let sbx: Sandbox;

beforeAll(async () => {
  d = await startDaemon();
  sbx = await Sandbox.create({ apiKey: d.apiKey, apiUrl: d.url, sandboxUrl: d.url, timeoutMs: 300_000 });
  const setup = await sbx.commands.run(
    [
      'echo root-only > /etc/cube-secret && chmod 600 /etc/cube-secret && mkdir -p /opt/rootdir && echo mine > /home/user/mine.txt && chown user /home/user/mine.txt',
      'echo r > /root/in-root && echo r > /opt/rootdir/root-file && echo r > /tmp/root-tmp && mkdir /tmp/root-tmpdir',
      // a tree of the user's with a directory inside that root locked: rm -r as the user fails there
      'mkdir -p /home/user/tree/locked /home/user/tree/open && echo x > /home/user/tree/locked/f && echo y > /home/user/tree/open/g && chown -R user:user /home/user/tree && chown root:root /home/user/tree/locked && chmod 700 /home/user/tree/locked',
      'echo u > /tmp/user-own && chown user /tmp/user-own',
    ].join(' && '),
    { user: 'root' },
  );
  expect(setup.exitCode).toBe(0);
}, 120_000);

afterAll(async () => {
  try {
    await sbx?.kill();
  } finally {
    await d?.stop();
  }
});

const run = async (cmd: string) => (await sbx.commands.run(cmd, { user: 'root' })).stdout;

describe('files as user', () => {
  it('cannot replace a root-owned 0600 file', async () => {
    await expect(sbx.files.write('/etc/cube-secret', 'overwritten\n', { user: 'user' })).rejects.toThrow(/Permission denied/);
    expect(await run('cat /etc/cube-secret; stat -c %a:%U /etc/cube-secret')).toBe('root-only\n600:root\n');
  });

  it('cannot create files or directories where it may not write (/root, a root-owned directory)', async () => {
    await expect(sbx.files.write('/root/planted', 'x', { user: 'user' })).rejects.toThrow(/Permission denied/);
    await expect(sbx.files.write('/opt/rootdir/sub/planted', 'x', { user: 'user' })).rejects.toThrow(/Permission denied/);
    await expect(sbx.files.makeDir('/opt/rootdir/made', { user: 'user' })).rejects.toThrow(/Permission denied/);
    expect(await run('ls -A /root /opt/rootdir')).not.toMatch(/planted|made|sub/);
  });

  it('writes where it may: its home (new and its own files, parents made), /tmp', async () => {
    await sbx.files.write('/home/user/mine.txt', 'changed\n', { user: 'user' });
    await sbx.files.write('/home/user/deep/er/new.txt', 'new\n', { user: 'user' });
    await sbx.files.write('/tmp/user-tmp.txt', 'tmp\n', { user: 'user' });
    expect(await sbx.files.makeDir('/home/user/made', { user: 'user' })).toBe(true);
    expect(
      await run('cat /home/user/mine.txt /home/user/deep/er/new.txt /tmp/user-tmp.txt; stat -c %U /home/user/deep/er/new.txt /home/user/deep /home/user/made'),
    ).toBe('changed\nnew\ntmp\nuser\nuser\nuser\n');
  });

  it('root writes anywhere', async () => {
    await sbx.files.write('/root/by-root', 'r\n', { user: 'root' });
    await sbx.files.write('/etc/cube-secret', 'root again\n', { user: 'root' });
    expect(await run('cat /root/by-root /etc/cube-secret')).toBe('r\nroot again\n');
  });
});

describe('reads, listings, stat, removes and renames as user', () => {
  it("cannot read root's 0600 file (the download) nor list, stat or read inside /root (0700)", async () => {
    await expect(sbx.files.read('/etc/cube-secret', { user: 'user' })).rejects.toThrow(/Permission denied/);
    await expect(sbx.files.list('/root', { user: 'user' })).rejects.toThrow(/Permission denied/);
    await expect(sbx.files.getInfo('/root/in-root', { user: 'user' })).rejects.toThrow(/Permission denied/);
    await expect(sbx.files.exists('/root/in-root', { user: 'user' })).rejects.toThrow(/Permission denied/);
    await expect(sbx.files.read('/root/in-root', { user: 'user' })).rejects.toThrow(/Permission denied/);
    // and what the user may: its own file, a world-readable one, its home
    expect(await sbx.files.read('/home/user/mine.txt', { user: 'user' })).toMatch(/./);
    expect(await sbx.files.read('/etc/passwd', { user: 'user' })).toMatch(/^root:/);
    expect((await sbx.files.getInfo('/etc/cube-secret', { user: 'user' })).name).toBe('cube-secret'); // stat needs only the way there
    expect((await sbx.files.list('/home/user', { user: 'user' })).map((e) => e.name)).toContain('mine.txt');
  });

  it('root reads and lists anywhere', async () => {
    expect(await sbx.files.read('/root/in-root', { user: 'root' })).toBe('r\n');
    expect((await sbx.files.list('/root', { user: 'root' })).map((e) => e.name)).toContain('in-root');
  });

  it('a deeper listing does not go into a directory the user may not read (as ls -R)', async () => {
    const user = (await sbx.files.list('/home/user/tree', { user: 'user', depth: 2 })).map((e) => e.path);
    expect(user).toEqual(['/home/user/tree/locked', '/home/user/tree/open', '/home/user/tree/open/g']);
    const root = (await sbx.files.list('/home/user/tree', { user: 'root', depth: 2 })).map((e) => e.path);
    expect(root).toEqual(['/home/user/tree/locked', '/home/user/tree/locked/f', '/home/user/tree/open', '/home/user/tree/open/g']);
  });

  it("cannot remove root's files from a root directory or from /tmp (sticky), nor a tree holding a directory it may not empty", async () => {
    await expect(sbx.files.remove('/opt/rootdir/root-file', { user: 'user' })).rejects.toThrow(/Permission denied/);
    await expect(sbx.files.remove('/tmp/root-tmp', { user: 'user' })).rejects.toThrow(/Operation not permitted/);
    await expect(sbx.files.remove('/tmp/root-tmpdir', { user: 'user' })).rejects.toThrow(/Operation not permitted/);
    await expect(sbx.files.remove('/root/in-root', { user: 'user' })).rejects.toThrow(/Permission denied/);
    await expect(sbx.files.remove('/home/user/tree', { user: 'user' })).rejects.toThrow(/Permission denied/);
    expect(
      await run('ls /opt/rootdir/root-file /tmp/root-tmp /root/in-root /home/user/tree/locked/f /home/user/tree/open/g; test -d /tmp/root-tmpdir && echo dir'),
    ).toBe('/home/user/tree/locked/f\n/home/user/tree/open/g\n/opt/rootdir/root-file\n/root/in-root\n/tmp/root-tmp\ndir\n');
    // its own file in /tmp and its own tree go
    await sbx.files.remove('/tmp/user-own', { user: 'user' });
    await sbx.files.remove('/home/user/tree/open', { user: 'user' });
    expect(await run('ls /tmp/user-own /home/user/tree/open 2>&1 | wc -l; ls /tmp/user-own 2>/dev/null || echo gone')).toBe('2\ngone\n');
  });

  it("cannot rename root's files out of a root directory or /tmp, nor its own into /root", async () => {
    await expect(sbx.files.rename('/opt/rootdir/root-file', '/home/user/stolen', { user: 'user' })).rejects.toThrow(/Permission denied/);
    await expect(sbx.files.rename('/tmp/root-tmp', '/tmp/renamed', { user: 'user' })).rejects.toThrow(/Operation not permitted/);
    await expect(sbx.files.rename('/home/user/mine.txt', '/root/planted', { user: 'user' })).rejects.toThrow(/Permission denied/);
    await expect(sbx.files.rename('/home/user/mine.txt', '/opt/rootdir/root-file', { user: 'user' })).rejects.toThrow(/Permission denied/);
    expect(await run('cat /opt/rootdir/root-file /tmp/root-tmp /home/user/mine.txt; ls /root /home/user')).not.toMatch(/stolen|renamed|planted/);
    // where it may: its home, parents made as the user
    const moved = await sbx.files.rename('/home/user/mine.txt', '/home/user/new/place.txt', { user: 'user' });
    expect(moved.path).toBe('/home/user/new/place.txt');
    expect(await run('stat -c %U /home/user/new /home/user/new/place.txt')).toBe('user\nuser\n');
    await sbx.files.rename('/home/user/new/place.txt', '/home/user/mine.txt', { user: 'user' });
  });

  it('cannot watch /root (the watch runs as the user inside)', async () => {
    await expect(sbx.files.watchDir('/root', () => undefined, { user: 'user' })).rejects.toThrow(/may not be read|Permission denied/);
  });
});
