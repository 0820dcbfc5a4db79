import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { apiKey } from '../../src/cli/io.js';
import { parseValue } from '../../src/cli/commands/config.js';
import { assertBuilt, cubectl } from './run-cli.js';

beforeAll(assertBuilt);

/** A loopback port nothing listens on. */
async function closedPort(): Promise<number> {
  const srv = createServer();
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  const port = (srv.address() as { port: number }).port;
  await new Promise<void>((r) => srv.close(() => r()));
  return port;
}

describe('cubectl exit codes', () => {
  it('3 when the daemon cannot be reached, naming the URL and how to start it', async () => {
    const url = `http://127.0.0.1:${await closedPort()}`;
    for (const args of [
      ['--api', url, 'nodes'],
      ['sandbox', 'ls', '--api', url, '--json'],
    ]) {
      const r = await cubectl(args);
      expect(r.code).toBe(3);
      expect(r.stderr).toMatch(new RegExp(`^cubectl: cannot reach cubed at ${url} \\(ECONNREFUSED\\); start it with \`cubed\``));
    }
    const viaEnv = await cubectl(['events'], { CUBE_API_URL: url });
    expect(viaEnv.code).toBe(3);
    expect(viaEnv.stderr).toContain(url);
  });

  it.each([
    [['bogus']],
    [['sandbox', 'exec']],
    [['sandbox', 'create', '--cpus', '0']],
    [['sandbox', 'create', '--memory-mib', '1.5']],
    [['sandbox', 'create', '--auto-resume']],
    [['sandbox', 'create', '--on-timeout', 'sleep']],
    [['sandbox', 'ls', '--state', 'sleeping']],
    [['sandbox', 'exec', 'sb1', '--env', 'NOEQUALS', '--', 'true']],
    [['node', 'drain', 'n1', '--deadline', '-1']],
    [['config', 'set', 'only-a-key']],
    [['events', '--limit', '0']],
  ])('2 for usage errors: %j', async (args) => {
    const r = await cubectl(args);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/^cubectl: [^\n]+\n$/);
  });

  it('0 for --help', async () => {
    const r = await cubectl(['sandbox', 'create', '--help']);
    expect(r.code).toBe(0);
    expect(r.stdout).toContain('Usage: cubectl sandbox create');
  });
});

describe('api key lookup', () => {
  const saved = { CUBE_API_KEY: process.env.CUBE_API_KEY, E2B_API_KEY: process.env.E2B_API_KEY };
  let dir: string | undefined;
  afterEach(() => {
    for (const [k, v] of Object.entries(saved))
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('CUBE_API_KEY, then E2B_API_KEY, then <data-dir>/api-key, else none', () => {
    dir = mkdtempSync(join(tmpdir(), 'cubed-test-key-'));
    delete process.env.CUBE_API_KEY;
    delete process.env.E2B_API_KEY;
    expect(apiKey(dir)).toBeUndefined();
    writeFileSync(join(dir, 'api-key'), 'from-file\n');
    expect(apiKey(dir)).toBe('from-file');
    process.env.E2B_API_KEY = 'from-e2b';
    expect(apiKey(dir)).toBe('from-e2b');
    process.env.CUBE_API_KEY = 'from-cube';
    expect(apiKey(dir)).toBe('from-cube');
  });
});

describe('config set VALUE', () => {
  it.each([
    ['0.75', 0.75],
    ['true', true],
    ['["cpu","mem"]', ['cpu', 'mem']],
    ['0.0.0.0:3000', '0.0.0.0:3000'],
    ['host', 'host'],
    ['"3"', '3'],
  ])('%s -> %j', (raw, value) => {
    expect(parseValue(raw)).toEqual(value);
  });
});
