import { readFileSync } from 'node:fs';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { generateConfigDoc } from '../../src/config/gen-doc.js';
import { loadConfig, packageRoot, resolveConfigDir } from '../../src/config/loader.js';
import { CubeletConfigSchema, MasterConfigSchema } from '../../src/config/schema.js';

const root = packageRoot();

describe('shipped config files', () => {
  it('parse and equal the schema defaults, key for key', () => {
    const shipped = loadConfig(join(root, 'config'));
    expect(shipped.master).toEqual(MasterConfigSchema.parse({}));
    expect(shipped.cubelet).toEqual(CubeletConfigSchema.parse({}));
  });

  it('carry the CubeSandbox numbers', () => {
    const { master, cubelet } = loadConfig(join(root, 'config'));
    expect(master.scheduler.node_max_mvm_num).toBe(3000);
    expect(master.scheduler.node_max_mem_reserved_in_mb).toBe(10240);
    expect(master.scheduler.overhead).toEqual({ vm_memory_overhead_base_mib: 42, vm_memory_overhead_coefficient: 64 });
    expect(master.host.quota).toEqual({ mem_oversell_ratio: 2, cpu_oversell_ratio: 3, disk_oversell_ratio: 20, paused_resource_release_ratio: 0 });
    expect(master.sandbox.default_spec).toEqual({ cpus: 1, memory_mib: 4096, disk_gib: 10 });
    expect(cubelet.plugins['io.cubelet.internal.v1.network'].tap_init_num).toBeGreaterThan(0);
  });
});

describe('docs/configuration.md', () => {
  it('is what the schema generates (run `npm run docs:config` after changing the schema)', () => {
    expect(readFileSync(join(root, 'docs/configuration.md'), 'utf8')).toBe(generateConfigDoc());
  });

  it('documents every key of both files with its mode', () => {
    const doc = generateConfigDoc();
    for (const key of ['api.listen', 'host.quota.paused_resource_release_ratio', 'quota.memory_mib', 'plugins."io.cubelet.internal.v1.network".tap_init_num'])
      expect(doc).toContain(`\`${key}\``);
    expect(doc).toMatch(/`api\.listen` \| [^\n]*\| restart \|/);
    expect(doc).toMatch(/`host\.quota\.paused_resource_release_ratio` \| `0` \| number, >= 0, <= 1 \| live \|/);
  });
});

describe('resolveConfigDir', () => {
  it('prefers the flag, then /etc/cubed when it exists, then the package config/', () => {
    const dir = mkdtempSync(join(tmpdir(), 'cubed-test-confdir-'));
    try {
      expect(resolveConfigDir(dir, '/nonexistent')).toBe(dir);
      expect(resolveConfigDir(undefined, dir)).toBe(dir);
      expect(resolveConfigDir(undefined, join(dir, 'absent'))).toBe(join(root, 'config'));
      expect(() => resolveConfigDir(join(dir, 'absent'))).toThrow(/does not exist/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
