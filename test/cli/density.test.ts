import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { assertBuilt, cubectl } from './run-cli.js';

const REF = ['density', '--node-cpus', '128', '--node-mem-gib', '251'];
let dir: string;

beforeAll(() => {
  assertBuilt();
  dir = mkdtempSync(join(tmpdir(), 'cubed-test-cli-density-'));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('cubectl density', () => {
  it('derives 117 / 58 / 307 / 469 for the reference node step by step', async () => {
    const r = await cubectl([...REF, '--release-ratio', '0.75']);
    expect(r.code).toBe(0);
    expect(r.stderr).toBe('');
    expect(r.stdout).toContain('footprint = memory + base + memory / coefficient = 4096 + 42 + 4096 / 64 = 4202 MiB');
    expect(r.stdout).toContain('paper ceiling   = 246784 x 2 / 4202 = floor(117.46) = 117');
    expect(r.stdout).toContain('safety boundary = 246784 / 4202 = floor(58.73) = 58');
    expect(r.stdout).toContain('cpu ceiling     = 128 x 3 x 0.8 / 1 = floor(307.2) = 307');
    expect(r.stdout).toContain('bottleneck      = memory');
    expect(r.stdout).toContain('all-paused ceiling = min(floor(memory), floor(cpu), node_max_mvm_num 3000) = 469');
  });

  it.each([
    [
      'reference',
      [],
      { paperCeiling: 117, safetyBoundary: 58, cpuCeiling: 307, bottleneck: 'memory', allPausedCeiling: 117, footprintMiB: 4202, effectiveCeiling: 117 },
    ],
    ['reference, r = 0.75', ['--release-ratio', '0.75'], { paperCeiling: 117, allPausedCeiling: 469, releaseRatio: 0.75 }],
    ['cpu-heavy spec', ['--sandbox-cpus', '4', '--sandbox-mem-mib', '512'], { cpuCeiling: 76, bottleneck: 'cpu', effectiveCeiling: 76 }],
    ['smaller reserve', ['--reserved-mib', '0'], { paperCeiling: 122, safetyBoundary: 61 }],
  ] as const)('--json: %s', async (_n, extra, expected) => {
    const r = await cubectl([...REF, ...extra, '--json']);
    expect(r.code).toBe(0);
    expect(JSON.parse(r.stdout)).toMatchObject(expected);
  });

  it('takes its parameters from --config (a file or a directory)', async () => {
    writeFileSync(join(dir, 'cubemaster.yaml'), 'host:\n  quota:\n    mem_oversell_ratio: 1\n    paused_resource_release_ratio: 0.5\n');
    for (const config of [dir, join(dir, 'cubemaster.yaml')]) {
      const r = await cubectl([...REF, '--config', config, '--json']);
      expect(r.code).toBe(0);
      expect(JSON.parse(r.stdout)).toMatchObject({ paperCeiling: 58, safetyBoundary: 58, releaseRatio: 0.5, allPausedCeiling: 117 });
    }
  });

  it.each([
    ['negative memory', [...REF.slice(0, 3), '--node-mem-gib', '-5'], /--node-mem-gib.*must be greater than 0/],
    ['negative sandbox memory', [...REF, '--sandbox-mem-mib', '-1'], /--sandbox-mem-mib.*must be greater than 0/],
    ['ratio 1.5', [...REF, '--release-ratio', '1.5'], /paused_resource_release_ratio must be between 0 and 1 \(got 1\.5\)/],
    [
      'reserve larger than the node',
      ['density', '--node-cpus', '4', '--node-mem-gib', '8'],
      /reserved memory 10240 MiB is not smaller than the node's 8192 MiB/,
    ],
    ['not a number', ['density', '--node-cpus', 'many', '--node-mem-gib', '8'], /--node-cpus.*not a number/],
    ['a missing required option', ['density', '--node-mem-gib', '8'], /required option '--node-cpus <n>' not specified/],
    ['an unknown option', [...REF, '--bogus'], /unknown option '--bogus'/],
    ['a missing --config', [...REF, '--config', '/nonexistent/cubemaster.yaml'], /--config \/nonexistent\/cubemaster\.yaml: no such file/],
  ])('exits 2 with one line for %s', async (_n, args, msg) => {
    const r = await cubectl(args);
    expect(r.code).toBe(2);
    expect(r.stdout).toBe('');
    expect(r.stderr).toMatch(/^cubectl: [^\n]+\n$/);
    expect(r.stderr).toMatch(msg);
  });

  it('exits 2 naming the key when the --config file is invalid', async () => {
    writeFileSync(join(dir, 'bad.yaml'), 'host:\n  quota:\n    paused_resource_release_ratio: 2\n');
    const r = await cubectl([...REF, '--config', join(dir, 'bad.yaml')]);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('host.quota.paused_resource_release_ratio: must be between 0 and 1');
  });
});
