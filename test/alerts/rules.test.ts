// The shipped alert rules (config/alerts.yml) under `promtool test rules` (test/alerts/alerts.test.yml:
// series as scraped, with job and instance, two control replicas, a single refusal), and the
// console keys their descriptions name are the keymap's. promtool comes from Debian's prometheus
// package, installed here when missing (a test-only package).
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { resolveKey } from '../../src/tui/keymap.js';
import { VIEWS } from '../../src/tui/views.js';

const ROOT = join(import.meta.dirname, '../..');
const RULES = join(ROOT, 'config/alerts.yml');

function havePromtool(): boolean {
  try {
    execFileSync('promtool', ['--version'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

beforeAll(() => {
  if (havePromtool()) return;
  const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
  execFileSync('apt-get', ['update', '-qq'], { env, stdio: 'ignore' });
  execFileSync('apt-get', ['install', '-y', '-qq', '--no-install-recommends', 'prometheus'], { env, stdio: 'ignore' });
}, 300_000);

describe('config/alerts.yml', () => {
  it('passes promtool check and its unit tests', () => {
    expect(execFileSync('promtool', ['check', 'rules', RULES], { encoding: 'utf8' })).toMatch(/SUCCESS: \d+ rules found/);
    // promtool exits non-zero on a failed case; its output says which alert and what it got.
    const out = execFileSync('promtool', ['test', 'rules', 'alerts.test.yml'], { cwd: join(ROOT, 'test/alerts'), encoding: 'utf8' });
    expect(out).toContain('SUCCESS');
  });

  it('names console keys the keymap binds to the views it says', () => {
    const rules = (parse(readFileSync(RULES, 'utf8')) as { groups: { rules: { alert: string; annotations: Record<string, string> }[] }[] }).groups.flatMap(
      (g) => g.rules,
    );
    let named = 0;
    for (const r of rules) {
      for (const [, key, view] of (r.annotations.description ?? '').matchAll(/key (\d), :(\w+)/g)) {
        named++;
        expect(VIEWS[Number(key) - 1], `${r.alert}: key ${key}`).toBe(view);
        expect(resolveKey(key!, 'nodes', true)?.id, `${r.alert}: key ${key}`).toBe(`view:${view}`);
      }
    }
    expect(named).toBeGreaterThanOrEqual(3);
  });
});
