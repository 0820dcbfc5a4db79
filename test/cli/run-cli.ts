// Runs the built cubectl (bin/cubectl -> dist/) as a user would; `npm run build:ts` first.
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { packageRoot } from '../../src/config/loader.js';

const root = packageRoot();

export function assertBuilt(): void {
  if (!existsSync(join(root, 'dist/src/cli/cubectl.js'))) throw new Error('dist/src/cli/cubectl.js is missing: run `npm run build:ts` first');
}

export interface CliResult {
  code: number;
  stdout: string;
  stderr: string;
}

export function cubectl(args: string[], env: Record<string, string | undefined> = {}): Promise<CliResult> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [join(root, 'bin/cubectl'), ...args],
      { env: { ...process.env, CUBE_API_URL: undefined, CUBE_API_KEY: undefined, E2B_API_KEY: undefined, ...env } as NodeJS.ProcessEnv },
      (err, stdout, stderr) => {
        const code = err ? (typeof err.code === 'number' ? err.code : 1) : 0;
        resolve({ code, stdout, stderr });
      },
    );
  });
}
