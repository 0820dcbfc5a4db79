// cubectl template build: a recipe into the e2b SDK's build body, and the SDK's files hash.
import { execFileSync } from 'node:child_process';
import { mkdir, mkdtemp, rm, symlink, writeFile } from 'node:fs/promises';
import { gunzipSync } from 'node:zlib';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseBuild } from '../../src/templates/build/steps.js';
import { copyArchive, copyFiles, filesHash, parseRecipe, recipeBody, type CopySpec } from '../../src/templates/recipe.js';

describe('recipes', () => {
  it('turn into the body the SDK sends, which the daemon parser accepts', () => {
    const r = parseRecipe(
      [
        'fromTemplate: base',
        'steps:',
        '  - run: make',
        '  - run: {cmd: apt-get install -y git, user: root}',
        '  - copy: {src: app, dest: /srv/, mode: 755}',
        '  - env: {PORT: 8000, DEBUG: true}',
        '  - workdir: /srv',
        '  - user: user',
        'startCmd: ./serve',
        'readyCmd: nc -z 127.0.0.1 8000',
      ].join('\n'),
      'r.yaml',
    );
    const { body, copies } = recipeBody(r, true);
    expect(body).toEqual({
      fromTemplate: 'base',
      startCmd: './serve',
      readyCmd: 'nc -z 127.0.0.1 8000',
      force: true,
      steps: [
        { type: 'RUN', args: ['make'], force: false },
        { type: 'RUN', args: ['apt-get install -y git', 'root'], force: false },
        { type: 'COPY', args: ['app', '/srv/', '', '0755'], force: false },
        { type: 'ENV', args: ['PORT', '8000', 'DEBUG', 'true'], force: false },
        { type: 'WORKDIR', args: ['/srv'], force: false },
        { type: 'USER', args: ['user'], force: false },
      ],
    });
    expect(copies).toEqual([{ step: 2, src: 'app', dest: '/srv/' }]);
    body.steps[2]!.filesHash = 'a'.repeat(64);
    expect(parseBuild(body).steps.map((s) => s.type)).toEqual(['RUN', 'RUN', 'COPY', 'ENV', 'WORKDIR', 'USER']);
  });

  it.each([
    ['steps: [', /not JSON or YAML/],
    ['steps: []', /exactly one of fromTemplate and fromImage/],
    ['fromImage: a\nsteps:\n  - rn: x', /steps\.0/],
    ['fromImage: a\nsteps:\n  - run: x\n    user: root', /steps\.0/],
    ['fromImage: a\nsteps:\n  - copy: {src: "*.py", dest: /x/}', /globs are for the SDK/],
    ['fromImage: a\nsteps:\n  - copy: {src: ../up, dest: /x/}', /must be inside the context/],
    ['fromImage: a\nfrom: b', /Unrecognized key/],
  ])('%j is refused naming the problem', (text, message) => {
    expect(() => recipeBody(parseRecipe(text, 'r.yaml'), false)).toThrow(message);
  });
});

describe('filesHash', () => {
  let dir: string;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'cubed-test-recipe-'));
    await mkdir(join(dir, 'app'));
    await writeFile(join(dir, 'app', 'a.txt'), 'a');
  });
  afterAll(() => rm(dir, { recursive: true, force: true }));

  const hashOf = async (c: CopySpec) => filesHash(c, await copyFiles(dir, c.src));
  it('changes with the contents, the destination and the files', async () => {
    const c = { step: 0, src: 'app', dest: '/srv/' };
    const h = await hashOf(c);
    expect(h).toMatch(/^[0-9a-f]{64}$/);
    expect(await hashOf(c)).toBe(h);
    expect(await hashOf({ ...c, dest: '/other/' })).not.toBe(h);
    await writeFile(join(dir, 'app', 'a.txt'), 'b');
    const changed = await hashOf(c);
    expect(changed).not.toBe(h);
    await writeFile(join(dir, 'app', 'b.txt'), '');
    expect(await hashOf(c)).not.toBe(changed);
    await expect(hashOf({ ...c, src: 'missing' })).rejects.toThrow(/no such file or directory/);
  });
});

describe('build contexts (issue 30 item 6)', () => {
  let dir: string;
  let outside: string;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'cubed-test-context-'));
    outside = await mkdtemp(join(tmpdir(), 'cubed-test-outside-'));
    await writeFile(join(outside, 'secret'), 'host secret\n');
    await mkdir(join(outside, 'big'));
    await mkdir(join(dir, 'app'));
    await writeFile(join(dir, 'app', 'main.py'), 'print(1)\n');
    await symlink(join(outside, 'secret'), join(dir, 'app', 'key'));
    await symlink(join(outside, 'big'), join(dir, 'app', 'big'));
    await symlink(outside, join(dir, 'out'));
  });
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
    await rm(outside, { recursive: true, force: true });
  });

  it('links are entries of their own, copied as links: the host file they name is neither read, hashed nor packed', async () => {
    const entries = await copyFiles(dir, 'app');
    expect(entries.map((e) => [e.rel, e.type, e.target])).toEqual([
      ['app', 'dir', undefined],
      ['app/big', 'symlink', join(outside, 'big')],
      ['app/key', 'symlink', join(outside, 'secret')],
      ['app/main.py', 'file', undefined],
    ]);
    const chunks: Buffer[] = [];
    for await (const c of copyArchive(entries)) chunks.push(c);
    const tar = gunzipSync(Buffer.concat(chunks));
    expect(tar.includes('host secret')).toBe(false);
    const listing = execFileSync('tar', ['-tvf', '-'], { input: tar }).toString();
    expect(listing).toMatch(new RegExp(`app/key -> ${join(outside, 'secret')}`));
    // The hash covers the link's target, as the SDK's (resolveSymlinks false) does.
    const c = { step: 0, src: 'app', dest: '/srv/' };
    const before = await filesHash(c, entries);
    await writeFile(join(outside, 'secret'), 'changed\n');
    expect(await filesHash(c, await copyFiles(dir, 'app'))).toBe(before);
  });

  it('a src reached through a link out of the context, and other file types, are refused', async () => {
    await expect(copyFiles(dir, 'out/secret')).rejects.toThrow(/not inside the context/);
    execFileSync('mkfifo', [join(dir, 'app', 'pipe')]);
    try {
      await expect(copyFiles(dir, 'app')).rejects.toThrow(/app\/pipe is not a file, directory or link/);
    } finally {
      await rm(join(dir, 'app', 'pipe'));
    }
  });

  it('stops past its bound, with progress on the way', async () => {
    const seen: [number, number][] = [];
    await expect(copyFiles(dir, 'app', { maxBytes: 1 << 20, maxEntries: 2 }, (n, b) => seen.push([n, b]))).rejects.toThrow(/more than 2 entries/);
    expect(seen.length).toBeGreaterThan(0);
    await writeFile(join(dir, 'app', 'blob'), Buffer.alloc(3000));
    try {
      await expect(copyFiles(dir, 'app', { maxBytes: 2048, maxEntries: 100 })).rejects.toThrow(/more than 0 MiB of files/);
    } finally {
      await rm(join(dir, 'app', 'blob'));
    }
  });
});
