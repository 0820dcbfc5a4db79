// The built entry point (bin/cubectl-tui): help, usage errors, and refusing a non-terminal.
// Needs `npm run build`.
import { spawnSync } from 'node:child_process';
import { resolve } from 'node:path';
import { describe, expect, it } from 'vitest';

const BIN = resolve(import.meta.dirname, '../../bin/cubectl-tui');
const run = (...args: string[]) => spawnSync(process.execPath, [BIN, ...args], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], timeout: 30_000 });
const runEnv = (env: Record<string, string>, ...args: string[]) =>
  spawnSync(process.execPath, [BIN, ...args], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], timeout: 30_000, env: { ...process.env, ...env } });

describe('cubectl-tui command line', () => {
  it('--help documents the flags, the views, the environment and exits 0', () => {
    const r = run('--help');
    expect(r.status).toBe(0);
    for (const s of [
      '--api <urls>',
      'CUBE_API_URL',
      'comma-separated',
      '--readonly',
      '--refresh <ms>',
      '--skin <name>',
      '"dark", "light", "16", "mono"',
      ':name',
      'CUBE_API_KEY',
      'NO_COLOR',
      'starts the bundled daemon',
    ])
      expect(r.stdout).toContain(s);
  });

  it.each([
    [['--skin', 'pink'], /^error: option '--skin <name>' argument 'pink' is invalid\. Allowed choices are dark, light, 16, mono\.\n$/],
    [['--refresh', '5'], /^error: .*between 50 and 60000\n$/],
    [['--api', 'ftp://x'], /^error: .*an http\(s\) URL/],
  ])('%j is a usage error: one line, exit 2', (args, msg) => {
    const r = run(...args);
    expect(r.status).toBe(2);
    expect(r.stderr).toMatch(msg);
  });

  it('reads CUBE_API_URL like cubectl: a bad one is a usage error naming it', () => {
    const r = runEnv({ CUBE_API_URL: 'http://127.0.0.1:9,ftp://x' });
    expect(r.status).toBe(2);
    expect(r.stderr).toBe('cubectl-tui: CUBE_API_URL: "ftp://x" is not an http(s) URL such as http://127.0.0.1:3000\n');
  });

  it('refuses to run without a terminal, pointing at cubectl --json', () => {
    const r = run('--api', 'http://127.0.0.1:9');
    expect(r.status).toBe(2);
    expect(r.stderr).toBe('cubectl-tui: needs a terminal (stdin and stdout must be a TTY); use cubectl --json for scripts\n');
  });
});
