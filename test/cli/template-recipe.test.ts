// cubectl template build: a recipe into the e2b SDK's build body, and the SDK's files hash.
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseBuild } from '../../src/cubelet/template-steps.js';
import { filesHash, parseRecipe, recipeBody } from '../../src/cli/template-recipe.js';

describe('recipes', () => {
  it('turn into the body the SDK sends, which the daemon parser accepts', () => {
    const r = parseRecipe(
      ['fromTemplate: base', 'steps:', '  - run: make', '  - run: {cmd: apt-get install -y git, user: root}', '  - copy: {src: app, dest: /srv/, mode: 755}', '  - env: {PORT: 8000, DEBUG: true}', '  - workdir: /srv', '  - user: user', 'startCmd: ./serve', 'readyCmd: nc -z 127.0.0.1 8000'].join('\n'),
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

  it('changes with the contents, the destination and the files', async () => {
    const c = { step: 0, src: 'app', dest: '/srv/' };
    const h = await filesHash(dir, c);
    expect(h).toMatch(/^[0-9a-f]{64}$/);
    expect(await filesHash(dir, c)).toBe(h);
    expect(await filesHash(dir, { ...c, dest: '/other/' })).not.toBe(h);
    await writeFile(join(dir, 'app', 'a.txt'), 'b');
    const changed = await filesHash(dir, c);
    expect(changed).not.toBe(h);
    await writeFile(join(dir, 'app', 'b.txt'), '');
    expect(await filesHash(dir, c)).not.toBe(changed);
    await expect(filesHash(dir, { ...c, src: 'missing' })).rejects.toThrow(/no such file or directory/);
  });
});
