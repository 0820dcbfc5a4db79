// The pure half of template builds: the SDK's build body into a plan, cache keys, config steps,
// COPY destinations.
import { describe, expect, it } from 'vitest';
import { afterLayer, applyStep, copyTarget, parseBuild, stepKey, type Step } from '../../src/templates/build/steps.js';

const H = 'a'.repeat(64);

describe('parseBuild', () => {
  it('reads what Template().serialize() sends', () => {
    // As e2b 2.51 serializes fromImage + setEnvs + runCmd(as root) + copy(mode) + setWorkdir + setUser + setStartCmd.
    const body = {
      startCmd: 'node server.js',
      readyCmd: 'curl -s localhost:3000',
      force: false,
      fromImage: 'node:20',
      steps: [
        { type: 'ENV', args: ['A', '1', 'B', 'two'], force: false },
        { type: 'RUN', args: ['apt-get update && apt-get install -y git', 'root'], force: false },
        { type: 'COPY', args: ['app', '/srv/', '', '0755'], force: false, forceUpload: undefined, resolveSymlinks: undefined, gzip: undefined, filesHash: H },
        { type: 'WORKDIR', args: ['/srv'], force: true },
        { type: 'USER', args: ['user'], force: false },
      ],
    };
    expect(parseBuild(body)).toEqual({
      from: { image: 'node:20' },
      startCmd: 'node server.js',
      readyCmd: 'curl -s localhost:3000',
      force: false,
      steps: [
        { type: 'ENV', env: { A: '1', B: 'two' }, force: false },
        { type: 'RUN', cmd: 'apt-get update && apt-get install -y git', user: 'root', force: false },
        { type: 'COPY', src: 'app', dest: '/srv/', mode: 0o755, filesHash: H, force: false },
        { type: 'WORKDIR', dir: '/srv', force: true },
        { type: 'USER', user: 'user', force: false },
      ],
    });
  });

  it.each([
    [{}, /exactly one of fromTemplate and fromImage/],
    [{ fromImage: 'a', fromTemplate: 'b' }, /exactly one/],
    [{ fromImage: 'a', fromImageRegistry: { type: 'gcp', serviceAccountJson: '{}' } }, /type 'gcp' is not supported here/],
    [{ fromImage: 'a', steps: [{ type: 'RUN', args: [] }] }, /step 1 \(RUN\): a command is required/],
    [{ fromImage: 'a', steps: [{ type: 'RUN', args: ['x', 'nobody'] }] }, /user must be 'root' or 'user'/],
    [{ fromImage: 'a', steps: [{ type: 'ENV', args: ['A'] }] }, /KEY, VALUE pairs/],
    [{ fromImage: 'a', steps: [{ type: 'ENV', args: ['1A', 'x'] }] }, /not a variable name/],
    [{ fromImage: 'a', steps: [{ type: 'COPY', args: ['a', '/b'] }] }, /filesHash is required/],
    [{ fromImage: 'a', steps: [{ type: 'COPY', args: ['a', '/b'], filesHash: '../../etc' }] }, /files hash must be 64/],
    [{ fromImage: 'a', steps: [{ type: 'COPY', args: ['a', '/b', '', '9999'], filesHash: H }] }, /mode must be octal/],
    [{ fromImage: 'a', steps: [{ type: 'WORKDIR', args: ['rel'] }] }, /must be an absolute path/],
    [
      {
        fromImage: 'a',
        steps: [
          { type: 'RUN', args: ['true'] },
          { type: 'ARG', args: [] },
        ],
      },
      /step 2 \(ARG\): unknown step type/,
    ],
    [{ fromImage: 'a', steps: 'RUN true' }, /steps/],
  ])('refuses %j with 400', (body, message) => {
    expect(() => parseBuild(body)).toThrow(expect.objectContaining({ kind: 'BAD_REQUEST', message: expect.stringMatching(message) }));
  });
});

describe('stepKey', () => {
  const run: Step = { type: 'RUN', cmd: 'make', force: false };
  it('chains: the same step on another parent, or another step, is another key; force is not part of it', () => {
    const k = stepKey('base', run);
    expect(k).toMatch(/^[0-9a-f]{64}$/);
    expect(stepKey('base', { ...run, force: true })).toBe(k);
    expect(stepKey('other', run)).not.toBe(k);
    expect(stepKey('base', { ...run, cmd: 'make all' })).not.toBe(k);
    expect(stepKey('base', { ...run, user: 'root' })).not.toBe(k);
  });
  it('changes with the files of a COPY', () => {
    const copy: Step = { type: 'COPY', src: 'a', dest: '/b', filesHash: H, force: false };
    expect(stepKey('p', copy)).not.toBe(stepKey('p', { ...copy, filesHash: 'b'.repeat(64) }));
  });
  it('after a layer, depends on the layer made', () => {
    expect(afterLayer('k', 'sha256:1')).not.toBe(afterLayer('k', 'sha256:2'));
    expect(afterLayer('k', 'sha256:1')).toBe(afterLayer('k', 'sha256:1'));
  });
});

describe('applyStep', () => {
  const c = { env: { A: '1' }, workdir: '', user: 'user' };
  it.each<[Step, object]>([
    [
      { type: 'ENV', env: { B: '2', A: 'x' }, force: false },
      { env: { A: 'x', B: '2' }, workdir: '', user: 'user' },
    ],
    [
      { type: 'WORKDIR', dir: '/app', force: false },
      { env: { A: '1' }, workdir: '/app', user: 'user' },
    ],
    [
      { type: 'USER', user: 'root', force: false },
      { env: { A: '1' }, workdir: '', user: 'root' },
    ],
    [{ type: 'RUN', cmd: 'x', force: false }, c],
  ])('%j', (s, want) => expect(applyStep(c, s)).toEqual(want));
});

describe('copyTarget', () => {
  it.each<[string, string, string, string, boolean, string | undefined]>([
    // src, dest, entry, workdir, isDir -> target
    ['app.py', '/srv/', 'app.py', '', false, '/srv/app.py'],
    ['app.py', '/srv/main.py', 'app.py', '', false, '/srv/main.py'],
    ['app', '/srv/', 'app', '', true, '/srv'],
    ['app', '/srv/', 'app/a/b.txt', '', false, '/srv/a/b.txt'],
    ['app', '/srv', 'app/x', '', false, '/srv/x'],
    ['./app/', '/srv', 'app/x', '', false, '/srv/x'],
    ['app/*.txt', '/t/', 'app/a.txt', '', false, '/t/a.txt'],
    ['*.txt', '/t/', 'a.txt', '', false, '/t/a.txt'],
    ['.', '/ctx', 'a/b', '', false, '/ctx/a/b'],
    ['app', 'rel/', 'app/x', '/work', false, '/work/rel/x'],
    ['app', 'rel/', 'app/x', '', false, '/home/user/rel/x'],
    ['app', '/srv/', 'other/x', '', false, undefined],
    ['app', '/srv/', 'apple', '', false, undefined],
    ['app', '/srv/', '../etc/passwd', '', false, undefined],
  ])('COPY %s %s: entry %s, workdir %j, dir %s -> %s', (src, dest, entry, workdir, isDir, want) => {
    expect(copyTarget(src, dest, entry, workdir, isDir)).toBe(want);
  });
});
