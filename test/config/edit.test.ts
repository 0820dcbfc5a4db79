import { describe, expect, it } from 'vitest';
import { parse } from 'smol-toml';
import YAML from 'yaml';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { setInText } from '../../src/config/edit.js';
import { packageRoot } from '../../src/config/loader.js';

const NET = 'io.cubelet.internal.v1.network';

describe('setInText: TOML', () => {
  it.each([
    ['replaces a value and keeps its comment', 'a = 1 # one\n', ['a'], 2, 'a = 2 # one\n'],
    ['keeps a comment after a string holding #', 'id = "x#y" # the id\n', ['id'], 'z', 'id = "z" # the id\n'],
    [
      'replaces inside a quoted table',
      `x = 1\n\n[plugins."${NET}"]\ntap_init_num = 32 # warm\ncidr = "10.0.0.0/16"\n`,
      ['plugins', NET, 'tap_init_num'],
      64,
      `x = 1\n\n[plugins."${NET}"]\ntap_init_num = 64 # warm\ncidr = "10.0.0.0/16"\n`,
    ],
    ['adds a root key before the first table', '# head\nx = 1\n\n[t]\ny = 2\n', ['z'], 'v', '# head\nx = 1\nz = "v"\n\n[t]\ny = 2\n'],
    ['adds a key at the end of its table', '[t]\ny = 2 # c\n\n[u]\nw = 1\n', ['t', 'k'], [1, 2], '[t]\ny = 2 # c\nk = [ 1, 2 ]\n\n[u]\nw = 1\n'],
    ['adds a missing table at the end', '# only a comment\n# [quota]\n', ['quota', 'cpus'], 8, '# only a comment\n# [quota]\n\n[quota]\ncpus = 8\n'],
  ] as const)('%s', (_name, text, segs, value, expected) => {
    const r = setInText('cubelet', text, segs, value);
    expect(r).toEqual({ text: expected, commentsKept: true });
  });

  it('falls back to a full rewrite (values kept, comments lost) for a multi-line value', () => {
    const text = '# c\nlist = [\n  1,\n  2,\n]\nother = "x"\n';
    const r = setInText('cubelet', text, ['list'], [3]);
    expect(r.commentsKept).toBe(false);
    expect(parse(r.text)).toEqual({ list: [3], other: 'x' });
  });
});

describe('setInText: YAML', () => {
  it('keeps comments, including the one on the changed line', () => {
    const text = '# top\nhost:\n  quota:\n    paused_resource_release_ratio: 0 # ratio\n    mem_oversell_ratio: 2\n';
    const r = setInText('master', text, ['host', 'quota', 'paused_resource_release_ratio'], 0.75);
    expect(r.text).toBe('# top\nhost:\n  quota:\n    paused_resource_release_ratio: 0.75 # ratio\n    mem_oversell_ratio: 2\n');
  });

  it.each([
    [['host', 'quota', 'paused_resource_release_ratio'], 0.75, '    paused_resource_release_ratio: 0.75  # share'],
    [['scheduler', 'filter', 'enable_filters'], ['cpu', 'mem'], '    enable_filters: ["cpu","mem"]'],
    [['sandbox', 'default_template'], 'alpine-3.20', '  default_template: alpine-3.20        # template'],
    [['api', 'listen'], '0.0.0.0:3000', '  listen: 0.0.0.0:3000        # address:port'],
  ] as const)('changes only the line of %j in the shipped file', (segs, value, line) => {
    const text = readFileSync(join(packageRoot(), 'config/cubemaster.yaml'), 'utf8');
    const out = setInText('master', text, segs, value).text.split('\n');
    const before = text.split('\n');
    const changed = out.map((l, i) => [l, before[i]] as const).filter(([a, b]) => a !== b);
    expect(out.length).toBe(before.length);
    expect(changed).toHaveLength(1);
    expect(changed[0]![0].startsWith(line)).toBe(true);
  });

  it('creates missing maps and sets lists', () => {
    const r = setInText('master', '', ['scheduler', 'filter', 'enable_filters'], ['cpu', 'mem']);
    expect(YAML.parse(r.text)).toEqual({ scheduler: { filter: { enable_filters: ['cpu', 'mem'] } } });
  });

  it('refuses to edit a file with a syntax error', () => {
    expect(() => setInText('master', 'a: [1\nb: 2\n', ['a'], 1)).toThrow(/^cubemaster\.yaml: /);
  });
});
