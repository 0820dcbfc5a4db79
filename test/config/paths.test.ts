import { describe, expect, it } from 'vitest';
import { diffConfig } from '../../src/config/diff.js';
import { formatPath, needsRestart, resolvePath } from '../../src/config/introspect.js';
import { CubeletConfigSchema, MasterConfigSchema, type Config } from '../../src/config/schema.js';

const NET = 'io.cubelet.internal.v1.network';

describe('resolvePath', () => {
  it.each([
    ['host.quota.paused_resource_release_ratio', 'master', ['host', 'quota', 'paused_resource_release_ratio']],
    ['api.listen', 'master', ['api', 'listen']],
    ['scheduler.score.resource_weights.mvm_num', 'master', ['scheduler', 'score', 'resource_weights', 'mvm_num']],
    [`plugins."${NET}".tap_init_num`, 'cubelet', ['plugins', NET, 'tap_init_num']],
    [`plugins.${NET}.tap_init_num`, 'cubelet', ['plugins', NET, 'tap_init_num']],
    ['quota.cpus', 'cubelet', ['quota', 'cpus']],
    ['node_id', 'cubelet', ['node_id']],
  ] as const)('%s', (raw, file, segs) => {
    const r = resolvePath(raw);
    expect(r.file).toBe(file);
    expect(r.segs).toEqual(segs);
  });

  it.each([
    ['nope.x', /^nope\.x: unknown key/],
    ['host.quota.nope', /^host\.quota\.nope: unknown key$/],
    ['api.listen.deeper', /^api\.listen: is a value/],
    ['plugins."unterminated', /unterminated quote/],
  ])('refuses %s', (raw, msg) => {
    expect(() => resolvePath(raw)).toThrow(msg);
  });

  it('formats segments back the way they are typed', () => {
    expect(formatPath(['plugins', NET, 'cidr'])).toBe(`plugins."${NET}".cidr`);
  });
});

describe('needsRestart', () => {
  it.each([
    ['master', ['api', 'listen'], true],
    ['master', ['host', 'quota', 'paused_resource_release_ratio'], false],
    ['cubelet', ['plugins', NET, 'tap_init_num'], true],
    ['cubelet', ['plugins', NET, 'allow_host_access'], false],
    ['cubelet', ['data_dir'], true],
  ] as const)('%s %j -> %s', (file, segs, expected) => {
    expect(needsRestart(file, segs)).toBe(expected);
  });
});

describe('diffConfig', () => {
  const base = (): Config => ({ master: MasterConfigSchema.parse({}), cubelet: CubeletConfigSchema.parse({}) });

  it('is empty for equal configs', () => {
    expect(diffConfig(base(), base())).toEqual([]);
  });

  it('lists each changed leaf with from, to and needsRestart', () => {
    const a = base();
    const b = base();
    b.master.host.quota.paused_resource_release_ratio = 0.75;
    b.master.api.listen = '0.0.0.0:3000';
    b.master.scheduler.filter.enable_filters = ['cpu', 'mem'];
    b.cubelet.quota = { cpus: 8 };
    expect(diffConfig(a, b)).toEqual([
      { path: 'api.listen', from: '127.0.0.1:3000', to: '0.0.0.0:3000', needsRestart: true },
      { path: 'scheduler.filter.enable_filters', from: a.master.scheduler.filter.enable_filters, to: ['cpu', 'mem'], needsRestart: false },
      { path: 'host.quota.paused_resource_release_ratio', from: 0, to: 0.75, needsRestart: false },
      { path: 'quota.cpus', from: undefined, to: 8, needsRestart: false },
    ]);
  });

  it('descends into maps', () => {
    const b = base();
    b.master.scheduler.score.resource_weights = { ...b.master.scheduler.score.resource_weights, mvm_num: 5 };
    expect(diffConfig(base(), b)).toEqual([{ path: 'scheduler.score.resource_weights.mvm_num', from: 2, to: 5, needsRestart: false }]);
  });
});
