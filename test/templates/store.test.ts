import { execFileSync } from 'node:child_process';
import { copyFileSync, mkdirSync, symlinkSync, writeFileSync } from 'node:fs';
import { mkdtemp, readFile, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { hostEtc, TemplateStore } from '../../src/templates/store.js';
import { findLeaks, run, useRig } from '../runtime/harness.js';

/** A tiny directory root filesystem: bash and the libraries it links, nothing from /usr. */
function bashRootfs(dir: string): void {
  const libs = execFileSync('ldd', ['/bin/bash'], { encoding: 'utf8' }).match(/\/\S+/g) ?? [];
  for (const f of ['/bin/bash', ...libs]) {
    mkdirSync(join(dir, dirname(f)), { recursive: true });
    copyFileSync(f, join(dir, f));
  }
  symlinkSync('bash', join(dir, 'bin/sh'));
  mkdirSync(join(dir, 'etc'));
  mkdirSync(join(dir, 'root'));
  mkdirSync(join(dir, 'home/user'), { recursive: true });
}

describe('host template contents', () => {
  it('has root and user accounts with locked passwords and a profile that keeps PATH', () => {
    const etc = hostEtc();
    expect(etc.passwd![0]).toContain('user:x:1000:1000:user:/home/user:/bin/bash');
    expect(
      etc
        .shadow![0].split('\n')
        .filter(Boolean)
        .every((l) => l.split(':')[1] === '*'),
    ).toBe(true);
    expect(etc.shadow![1]).toBe(0o600);
    expect(etc.profile![0]).toMatch(/if \[ -z "\$PATH" \]/);
  });
});

describe('templates', () => {
  const rig = useRig('templates');
  let scratch: string;
  beforeAll(async () => {
    scratch = await mkdtemp(join(tmpdir(), 'cubed-test-template-'));
  });
  afterAll(async () => {
    await rm(scratch, { recursive: true, force: true });
  });

  it('generates the host template once with nothing of the host outside /usr', async () => {
    const root = rig().host.layers[0]!;
    expect((await stat(join(root, 'home/user'))).uid).toBe(1000);
    expect((await stat(join(root, 'root'))).mode & 0o777).toBe(0o700);
    expect(await readFile(join(root, 'etc/shadow'), 'utf8')).not.toBe(await readFile('/etc/shadow', 'utf8'));
    const again = await new TemplateStore(rig().dataDir).resolve('host');
    expect(again).toEqual(rig().host);
  });

  it('registers a directory template, lists it and runs sandboxes from it', async () => {
    const dir = join(scratch, 'bash-root');
    bashRootfs(dir);
    await expect(rig().templates.registerTemplate('bad name', dir)).rejects.toMatchObject({ kind: 'BAD_REQUEST' });
    await expect(rig().templates.registerTemplate('host', dir)).rejects.toMatchObject({ kind: 'CONFLICT' });
    await expect(rig().templates.registerTemplate('empty', scratch)).rejects.toMatchObject({ kind: 'BAD_REQUEST' });
    await rig().templates.registerTemplate('bash-only', dir);
    const store = new TemplateStore(rig().dataDir); // persisted
    expect((await store.listTemplates()).map((t) => t.name)).toEqual(['host', 'bash-only']);
    await expect(store.resolve('nope')).rejects.toMatchObject({ kind: 'NOT_FOUND' });
    const template = await store.resolve('bash-only');
    expect(template).toMatchObject({ name: 'bash-only', layers: [dir], bindHostUsr: false });

    const h = await rig().driver.create(rig().spec({ template }));
    const r = await run(rig(), h, ['/bin/bash', '-c', 'echo $BASH_VERSION; test -e /usr/bin/python3 && echo host-usr; echo x > /tmp/f; echo done'], {
      user: 'root',
    });
    expect(r.stdout).toMatch(/^\d+\.\d+.*\ndone\n$/);
    await rig().driver.destroy(h.sandboxID);
  });

  it('runs sandboxes from a template on a filesystem mounted after the driver started', async () => {
    // The create helper works in a copy of the host's mount table made when it started.
    const first = await rig().driver.create(rig().spec());
    await rig().driver.destroy(first.sandboxID);
    const dir = join(scratch, 'cube-late-mount');
    mkdirSync(dir);
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=64m', 'cube-late-mount', dir]);
    try {
      bashRootfs(dir);
      writeFileSync(join(dir, 'etc/marker'), 'on the late mount\n');
      const template = await rig().templates.registerTemplate('late-mount', dir);
      const h = await rig().driver.create(rig().spec({ template }));
      const r = await run(rig(), h, ['/bin/bash', '-c', 'read -r line < /etc/marker; echo "$line"'], { user: 'root' });
      expect(r.stdout).toBe('on the late mount\n');
      await rig().driver.destroy(h.sandboxID);
    } finally {
      execFileSync('umount', [dir]);
    }
  });

  it('leaves nothing behind when a create fails', async () => {
    const spec = rig().spec({ template: { name: 'gone', layers: [join(scratch, 'missing')], bindHostUsr: false } });
    await expect(rig().driver.create(spec)).rejects.toMatchObject({
      kind: 'CREATE_FAILED',
      message: expect.stringMatching(/open_tree \S*missing: No such file|mount overlay/),
    });
    const leaks = findLeaks(rig().tag, rig().dataDir);
    expect([...leaks.cgroups, ...leaks.dirs].filter((x) => x.includes(spec.sandboxID))).toEqual([]);
    await expect(rig().driver.create(spec)).rejects.toMatchObject({ kind: 'CREATE_FAILED' }); // the id is free again
  });
});
