// `cubectl bench` end to end: the built CLI against a real cubed, through the E2B REST and
// envd paths. Checks shapes and bookkeeping, never timings.
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { assertBuilt, cubectl } from '../cli/run-cli.js';
import { startDaemon, type TestDaemon } from '../helpers/daemon.js';
import { slotRules } from '../helpers/kernel.js';

let d: TestDaemon;
let dir: string;

beforeAll(async () => {
  assertBuilt();
  dir = mkdtempSync(join(tmpdir(), 'cubed-test-bench-'));
  d = await startDaemon();
});

afterAll(async () => {
  await d?.stop();
  rmSync(dir, { recursive: true, force: true });
});

const env = () => ({ CUBE_API_URL: d.url, CUBE_API_KEY: d.apiKey });

async function liveSandboxes(): Promise<unknown[]> {
  const res = await fetch(`${d.url}/admin/v1/sandboxes`, { headers: { 'x-api-key': d.apiKey } });
  return (await res.json()) as unknown[];
}

describe('cubectl bench', () => {
  it.each(['create-delete', 'create-exec-delete', 'pause-resume', 'create-only'])('%s writes a comparable JSON result and leaves no sandbox', async (mode) => {
    const file = join(dir, `${mode}.json`);
    const r = await cubectl(['bench', '-m', mode, '-n', '4', '-c', '2', '-w', '1', '--json', file], env());
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/grade [SABCD]/);
    const res = JSON.parse(readFileSync(file, 'utf8'));
    expect(res.summary).toMatchObject({ count: 4, success: 4, failed: 0 });
    expect(Object.keys(res.summary.latencyMs).sort()).toEqual(['avg', 'max', 'min', 'p50', 'p90', 'p95', 'p99', 'std']);
    expect(res.summary.throughputPerSec).toBeGreaterThan(0);
    expect(res.errors).toEqual({});
    expect(res.config).toMatchObject({ mode, concurrency: 2, count: 4, warmup: 1 });
    if (mode === 'create-exec-delete') expect(res.phases.exec.p50).toBeGreaterThan(0);
    expect(await liveSandboxes()).toEqual([]);
  });

  it('--network-policy rules creates each sandbox with its own egress rules (no internet, 24 allowOut)', async () => {
    const file = join(dir, 'rules.json');
    const seen: string[][] = [];
    // Sample the node's nftables table while the run goes on: the sandboxes' rules are there.
    const poll = setInterval(() => {
      void slotRules(d.tag).then(
        (m) => seen.push(...m.values()),
        () => undefined,
      );
    }, 20);
    try {
      // Each sandbox lives a second (--lifetime 1): long enough for the sampling to see its rules.
      const r = await cubectl(['bench', '-m', 'create-delete', '-n', '3', '-c', '3', '--lifetime', '1', '--network-policy', 'rules', '--json', file], env());
      expect(r.code).toBe(0);
    } finally {
      clearInterval(poll);
    }
    const res = JSON.parse(readFileSync(file, 'utf8'));
    expect(res.summary).toMatchObject({ count: 3, success: 3 });
    expect(res.config.networkPolicy).toBe('rules');
    expect(seen.some((rules) => rules[0]!.includes('151.101.0.0/24') && rules.at(-1) === 'drop')).toBe(true);
    expect(await liveSandboxes()).toEqual([]);
    // Every rule goes with its sandbox's slot, which is reset in the background after the delete.
    let left = await slotRules(d.tag);
    for (let i = 0; i < 200 && left.size > 0; i++) {
      await new Promise((r) => setTimeout(r, 50));
      left = await slotRules(d.tag);
    }
    expect(left.size).toBe(0);
  });

  it('groups failures by code and exits 1 (wrong key)', async () => {
    const r = await cubectl(['bench', '-n', '3', '-c', '1', '--json'], { ...env(), CUBE_API_KEY: 'e2b_wrong' });
    expect(r.code).toBe(1);
    const res = JSON.parse(r.stdout);
    expect(res.summary).toMatchObject({ count: 3, success: 0, failed: 3 });
    expect(res.errors).toEqual({ '130401': 3 });
    expect(res.errorMessages['130401']).toMatch(/^POST \/v2\/sandboxes: 401 /);
    expect(res.grade).toBe('D');
  });

  it('compare prints ratios of two results; a file that is not a result exits 2', async () => {
    const a = join(dir, 'a.json');
    const b = join(dir, 'b.json');
    const mk = (p99: number, tput: number) => ({
      summary: {
        count: 1,
        success: 1,
        failed: 0,
        successRate: 1,
        durationSec: 1,
        throughputPerSec: tput,
        latencyMs: { min: 1, avg: 1, std: 0, p50: 1, p90: 1, p95: 1, p99, max: p99 },
      },
      errors: {},
    });
    writeFileSync(a, JSON.stringify(mk(100, 10)));
    writeFileSync(b, JSON.stringify(mk(50, 20)));
    const r = await cubectl(['--json', 'bench', 'compare', a, b]);
    expect(r.code).toBe(0);
    const rows = JSON.parse(r.stdout) as { metric: string; ratio: number; better: boolean }[];
    expect(rows.find((x) => x.metric === 'p99')).toMatchObject({ ratio: 0.5, better: true });
    expect(rows.find((x) => x.metric === 'throughputPerSec')).toMatchObject({ ratio: 2, better: true });
    writeFileSync(a, '{"hello": 1}');
    const bad = await cubectl(['bench', 'compare', a, b]);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/not a cubectl bench result/);
  });

  it('usage errors exit 2 with one line', async () => {
    for (const args of [
      ['bench', '--workload', 'steady'],
      ['bench', '-m', 'nope'],
      ['bench', '--spec', 'cpus=x'],
    ]) {
      const r = await cubectl(args, env());
      expect(r.code).toBe(2);
      expect(r.stderr.trim().split('\n')).toHaveLength(1);
    }
  });
});
