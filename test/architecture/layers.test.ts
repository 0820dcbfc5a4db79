// The import direction of src/ (api -> scheduler -> cubelet/store -> runtime/network -> base -> model), as
// .dependency-cruiser.cjs states it, with no exceptions: checked over the real tree, and
// over a fixture that breaks it, so the rules are known to fire.
import { join, resolve } from 'node:path';
import { execa } from 'execa';
import { describe, expect, it } from 'vitest';

const ROOT = resolve(import.meta.dirname, '../..');
const CONFIG = join(ROOT, '.dependency-cruiser.cjs');
const depcruise = (cwd: string) => execa(join(ROOT, 'node_modules/.bin/depcruise'), ['src', '--config', CONFIG, '--output-type', 'err'], { cwd, reject: false });

describe('layers', () => {
  it('src/ imports only downward', async () => {
    const r = await depcruise(ROOT);
    expect(r.stdout + r.stderr).toContain('no dependency violations found');
    expect(r.exitCode).toBe(0);
  }, 120_000);

  it('upward imports (to the scheduler, to the API from the node RPC server or to its wire types, from the model to the base layer) are refused by name', async () => {
    const r = await depcruise(join(import.meta.dirname, 'fixture'));
    expect(r.exitCode).not.toBe(0);
    const found = r.stdout.split('\n').filter((l) => l.includes('error ')).map((l) => l.trim()).sort();
    expect(found).toEqual([
      'error cubelet-store-imports-up: src/cubelet/rpc-server.ts → src/api/http.ts',
      'error model-imports-up: src/model/up.ts → src/errors.ts',
      'error runtime-network-imports-up: src/runtime/up.ts → src/api/types.ts',
      'error runtime-network-imports-up: src/runtime/up.ts → src/scheduler/pick.ts',
    ]);
  }, 120_000);
});
