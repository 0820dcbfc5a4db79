// The import direction of the whole tree (src/, components/, bench/: model -> base -> scheduler ->
// runtime/network -> cubelet/store -> control -> api -> entry points), the scheduler's purity, the
// console asking the API, and no cycles, as .dependency-cruiser.cjs states them with no exceptions:
// checked over the real tree, and over a fixture that breaks each rule, so every rule is known to fire.
import { createRequire } from 'node:module';
import { join, resolve } from 'node:path';
import { execa } from 'execa';
import { describe, expect, it } from 'vitest';

const ROOT = resolve(import.meta.dirname, '../..');
const CONFIG = join(ROOT, '.dependency-cruiser.cjs');
const depcruise = (cwd: string) =>
  execa(join(ROOT, 'node_modules/.bin/depcruise'), ['src', 'components', 'bench', '--config', CONFIG, '--output-type', 'err'], { cwd, reject: false });
const RULES = (createRequire(import.meta.url)(CONFIG) as { forbidden: { name: string }[] }).forbidden.map((r) => r.name);

describe('layers', () => {
  it('src/, components/ and bench/ import only downward, without cycles', async () => {
    const r = await depcruise(ROOT);
    expect(r.stdout + r.stderr).toContain('no dependency violations found');
    expect(r.exitCode).toBe(0);
  }, 120_000);

  it('every rule fires on the fixture that breaks it', async () => {
    const r = await depcruise(join(import.meta.dirname, 'fixture'));
    expect(r.exitCode).not.toBe(0);
    const found = r.stdout
      .split('\n')
      .filter((l) => l.includes('error '))
      .map((l) => l.trim())
      .sort();
    expect(found).toEqual([
      'error api-imports-up: src/api/up.ts → src/cli/main.ts',
      'error base-imports-up: src/ids.ts → src/scheduler/pick.ts',
      'error console-asks-the-api: components/Node.tsx → src/control/place.ts',
      'error console-asks-the-api: src/tui/describe.ts → src/scheduler/pick.ts',
      'error control-imports-up: src/control/place.ts → src/api/types.ts',
      'error cubelet-store-imports-up: src/cubelet/rpc-server.ts → src/api/http.ts',
      'error model-imports-up: src/model/up.ts → src/errors.ts',
      'error network-agent-one-way-1: src/network/pool.ts → src/network/agent.ts',
      'error network-agent-one-way-2: src/network/slot.ts → src/network/pool.ts',
      'error network-agent-one-way-3: src/network/slot.ts → src/network/firewall.ts',
      'error network-agent-one-way-4: src/network/firewall.ts → src/network/slot.ts',
      'error no-cycles: src/model/a.ts →',
      'error no-cycles: src/network/firewall.ts →',
      'error runtime-network-imports-up: src/runtime/up.ts → src/api/types.ts',
      'error runtime-network-imports-up: src/runtime/up.ts → src/control/place.ts',
      'error scheduler-imports-up: src/scheduler/up.ts → src/runtime/up.ts',
      'error scheduler-pure: src/scheduler/impure.ts → src/ids.ts',
      'error scheduler-pure: src/scheduler/up.ts → src/runtime/up.ts',
    ]);
    // No rule without a fixture that breaks it.
    expect(RULES.filter((name) => !found.some((l) => l.startsWith(`error ${name}:`)))).toEqual([]);
  }, 120_000);
});
