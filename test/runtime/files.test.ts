import { existsSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { beforeAll, describe, expect, it } from 'vitest';
import { splitSandboxPath } from '../../src/runtime/ns/files.js';
import type { SandboxHandle } from '../../src/runtime/types.js';
import { run, useRig } from './harness.js';

describe('splitSandboxPath', () => {
  it.each([
    ['/a/b', ['a', 'b']],
    ['/a//./b/', ['a', 'b']],
    ['notes.txt', ['home', 'user', 'notes.txt']],
    ['/', []],
  ])('%s', (path, comps) => expect(splitSandboxPath(path)).toEqual(comps));

  it.each(['/a/../b', '..', '', 'a\0b'])('refuses %j', (path) => {
    expect(() => splitSandboxPath(path)).toThrow(expect.objectContaining({ kind: 'BAD_REQUEST' }));
  });
});

describe('ns driver files', () => {
  const rig = useRig('files');
  let h: SandboxHandle;
  const text = async (p: string) => Buffer.concat(await (await rig().driver.files.read(h, p)).toArray()).toString();
  beforeAll(async () => {
    h = await rig().driver.create(rig().spec());
  });

  it('writes (creating parents, owned by the user), reads, stats and lists', async () => {
    const st = await rig().driver.files.write(h, '/home/user/a/b/c.txt', Buffer.from('hello'));
    expect(st).toMatchObject({ path: '/home/user/a/b/c.txt', name: 'c.txt', type: 'file', size: 5, uid: 1000, gid: 1000 });
    expect((await rig().driver.files.stat(h, '/home/user/a')).uid).toBe(1000);
    expect(await text('/home/user/a/b/c.txt')).toBe('hello');
    await rig().driver.files.write(h, 'stream.txt', Readable.from([Buffer.from('x'), Buffer.from('y')]), 'root');
    expect(await rig().driver.files.stat(h, '/home/user/stream.txt')).toMatchObject({ size: 2, uid: 0 });
    const seen = await run(rig(), h, ['sh', '-c', 'cat /home/user/a/b/c.txt; stat -c %U /home/user/a/b']);
    expect(seen.stdout).toBe('hellouser\n');
    const listing = await rig().driver.files.list(h, '/home/user', 3);
    expect(listing.map((f) => `${f.type} ${f.path}`)).toEqual([
      'dir /home/user/a',
      'dir /home/user/a/b',
      'file /home/user/a/b/c.txt',
      'file /home/user/stream.txt',
    ]);
    expect((await rig().driver.files.list(h, '/home/user')).length).toBe(2);
    expect(await rig().driver.files.stat(h, '/')).toMatchObject({ path: '/', name: '/', type: 'dir' });
    expect((await rig().driver.files.list(h, '/')).map((f) => f.path)).toEqual(expect.arrayContaining(['/etc', '/home', '/tmp', '/usr']));
  });

  it('makes directories, moves and removes', async () => {
    expect(await rig().driver.files.mkdir(h, '/home/user/d1/d2')).toBe(true);
    expect(await rig().driver.files.mkdir(h, '/home/user/d1/d2')).toBe(false);
    await rig().driver.files.write(h, '/home/user/d1/f', Buffer.from('1'));
    const moved = await rig().driver.files.move(h, '/home/user/d1/f', '/home/user/d3/g');
    expect(moved).toMatchObject({ path: '/home/user/d3/g', type: 'file' });
    await expect(rig().driver.files.stat(h, '/home/user/d1/f')).rejects.toMatchObject({ kind: 'NOT_FOUND' });
    await rig().driver.files.remove(h, '/home/user/d1');
    await expect(rig().driver.files.stat(h, '/home/user/d1')).rejects.toMatchObject({ kind: 'NOT_FOUND' });
    await expect(rig().driver.files.remove(h, '/home/user/d1')).rejects.toMatchObject({ kind: 'NOT_FOUND' });
    await expect(rig().driver.files.read(h, '/home/user/d3')).rejects.toMatchObject({ kind: 'BAD_REQUEST' });
  });

  it('follows symlinks inside the sandbox, absolute ones from the sandbox root', async () => {
    const r = await run(
      rig(),
      h,
      ['sh', '-c', 'echo inside > /tmp/t; ln -s /tmp/t /home/user/abs; ln -s ../../tmp/t /home/user/rel; ln -s /etc /home/user/etc'],
      { user: 'root' },
    );
    expect(r.exitCode).toBe(0);
    expect(await text('/home/user/abs')).toBe('inside\n');
    expect(await text('/home/user/rel')).toBe('inside\n');
    expect(await text('/home/user/etc/passwd')).toMatch(/^root:x:0:0/); // the sandbox's, not the host's
    expect(await rig().driver.files.stat(h, '/home/user/abs')).toMatchObject({ type: 'symlink', symlinkTarget: '/tmp/t' });
    expect((await text('/bin/sh')).length).toBeGreaterThan(1000); // through bin -> usr/bin and the /usr bind
  });

  it('refuses .. and symlinks that lead out of the sandbox', async () => {
    await run(rig(), h, ['sh', '-c', 'ln -s ../../../../../../etc/shadow /home/user/out; ln -s ../../.. /home/user/up'], { user: 'root' });
    await expect(rig().driver.files.read(h, '/home/user/out')).rejects.toMatchObject({ kind: 'BAD_REQUEST' });
    await expect(rig().driver.files.read(h, '/home/user/up/etc/passwd')).rejects.toMatchObject({ kind: 'BAD_REQUEST' });
    await expect(rig().driver.files.write(h, '/home/user/up/x', Buffer.from('x'))).rejects.toMatchObject({ kind: 'BAD_REQUEST' });
    await expect(rig().driver.files.read(h, '/home/user/../../etc/passwd')).rejects.toMatchObject({ kind: 'BAD_REQUEST' });
    await expect(rig().driver.files.read(h, '/proc/self/root/etc/shadow')).rejects.toMatchObject({ kind: 'BAD_REQUEST' });
    await expect(rig().driver.files.write(h, '/usr/bin/x', Buffer.from('x'))).rejects.toMatchObject({ kind: 'BAD_REQUEST' });
    await expect(rig().driver.files.remove(h, '/')).rejects.toMatchObject({ kind: 'BAD_REQUEST' });
  });

  it('never reaches the host while the sandbox swaps a directory of the path for a symlink', async () => {
    // A host directory the sandbox cannot see (its /tmp is its own): a path walk that let the
    // kernel follow the sandbox's absolute link would read or write here, as host root.
    const host = mkdtempSync(join(tmpdir(), 'cube-files-race-'));
    writeFileSync(join(host, 'secret'), 'HOST');
    // Inside: `race` flips between a real directory and a link to that host path, atomically
    // (renameat2 RENAME_EXCHANGE), as fast as the sandbox can, until /tmp/stop appears.
    const swapper = `
import ctypes, os
os.chdir('/home/user')
os.makedirs('race', exist_ok=True)
open('race/secret', 'w').write('sandbox')
os.symlink('${host}', 'link')
libc = ctypes.CDLL(None, use_errno=True)
while not os.path.exists('/tmp/stop'):
    libc.syscall(316, -100, b'race', -100, b'link', 2)
`;
    await run(rig(), h, ['sh', '-c', `python3 -c "${swapper}" </dev/null >/dev/null 2>&1 &`], { user: 'root' });
    try {
      const files = rig().driver.files;
      const seen = new Set<string>();
      for (let i = 0; i < 300; i++) {
        await files.write(h, `/home/user/race/w${i}`, Buffer.from('x')).catch(() => {});
        await files.mkdir(h, `/home/user/race/d${i}/e`).catch(() => {});
        await files.move(h, `/home/user/race/w${i}`, `/home/user/race/m${i}`).catch(() => {});
        await files.remove(h, `/home/user/race/d${i}`).catch(() => {});
        seen.add(
          await files.read(h, '/home/user/race/secret').then(
            async (r) => Buffer.concat(await r.toArray()).toString(),
            () => 'refused',
          ),
        );
      }
      expect(readdirSync(host)).toEqual(['secret']);
      expect(seen.has('HOST')).toBe(false);
      expect(seen.has('sandbox')).toBe(true); // the walk did run through the directory
    } finally {
      await run(rig(), h, ['touch', '/tmp/stop'], { user: 'root' });
      rmSync(host, { recursive: true, force: true });
    }
    expect(existsSync(host)).toBe(false);
  });

  it('refuses a handle whose pid is not the sandbox init (e.g. reused)', async () => {
    await expect(rig().driver.files.read({ ...h, initPid: process.pid }, '/etc/passwd')).rejects.toMatchObject({ kind: 'NOT_FOUND' });
  });

  it('works while the sandbox is paused', async () => {
    await rig().driver.pause(h);
    try {
      await rig().driver.files.write(h, '/tmp/paused', Buffer.from('p'));
      expect(await text('/tmp/paused')).toBe('p');
    } finally {
      await rig().driver.resume(h);
    }
  });
});
