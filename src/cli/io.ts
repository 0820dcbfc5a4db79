// What every cubectl verb shares: global options, the client, exit codes, output helpers.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { InvalidArgumentError, type Command } from 'commander';
import { CubeClient, DEFAULT_TIMEOUT_MS } from './client.js';

export const EXIT = { OK: 0, FAILED: 1, USAGE: 2, UNREACHABLE: 3 } as const;

export const DEFAULT_API = 'http://127.0.0.1:3000';
export const DEFAULT_DATA_DIR = '/var/lib/cubed';

/** Invalid input the user can fix: exit 2 with a one-line reason. */
export class UsageError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'UsageError';
  }
}

/** The operation ran and failed (the reason is already printed, or is the message): exit 1 or a given code. */
export class ExitError extends Error {
  readonly exitCode: number;
  constructor(message: string, exitCode: number = EXIT.FAILED) {
    super(message);
    this.name = 'ExitError';
    this.exitCode = exitCode;
  }
}

export interface Globals {
  api: string;
  json: boolean;
  dataDir: string;
  /** --request-timeout / CUBE_API_TIMEOUT, in ms. */
  timeoutMs: number;
}

export function globals(cmd: Command): Globals {
  const o = cmd.optsWithGlobals<{ api?: string; json?: boolean; dataDir?: string; requestTimeout?: string }>();
  const raw = o.requestTimeout ?? process.env.CUBE_API_TIMEOUT;
  const sec = raw === undefined ? DEFAULT_TIMEOUT_MS / 1000 : Number(raw);
  if (!(Number.isFinite(sec) && sec > 0 && sec <= 3600)) throw new UsageError(`request timeout ${JSON.stringify(raw)}: seconds from more than 0 to 3600`);
  return { api: o.api ?? process.env.CUBE_API_URL ?? DEFAULT_API, json: o.json === true, dataDir: o.dataDir ?? DEFAULT_DATA_DIR, timeoutMs: sec * 1000 };
}

/**
 * `--api` / CUBE_API_URL as a list: one URL, or several comma-separated control-plane replicas
 * (any serves any request). Each must be http(s); the origins come back in the given order.
 */
export function apiUrls(spec: string): string[] {
  const urls = spec
    .split(',')
    .map((u) => u.trim())
    .filter(Boolean);
  if (urls.length === 0) throw new UsageError('no API URL given (e.g. http://127.0.0.1:3000, or several separated by commas)');
  return urls.map((u) => {
    try {
      const url = new URL(u);
      if (url.protocol === 'http:' || url.protocol === 'https:') return url.origin;
    } catch {
      // reported below
    }
    throw new UsageError(`"${u}" is not an http(s) URL such as http://127.0.0.1:3000`);
  });
}

/** CUBE_API_KEY, else E2B_API_KEY, else the key file cubed wrote into its data dir (when readable). */
export function apiKey(dataDir: string): string | undefined {
  const env = process.env.CUBE_API_KEY || process.env.E2B_API_KEY;
  if (env) return env;
  try {
    return readFileSync(join(dataDir, 'api-key'), 'utf8').trim() || undefined;
  } catch {
    return undefined;
  }
}

export function clientFor(cmd: Command): CubeClient {
  const g = globals(cmd);
  const key = apiKey(g.dataDir);
  return new CubeClient({ baseUrl: g.api, timeoutMs: g.timeoutMs, ...(key ? { apiKey: key } : {}) });
}

export function printJson(value: unknown): void {
  process.stdout.write(`${JSON.stringify(value, null, 2)}\n`);
}

/** Left-aligned columns, two spaces apart; the header row is upper-case. */
export function table(headers: string[], rows: (string | number)[][]): string {
  const cells = [headers.map((h) => h.toUpperCase()), ...rows.map((r) => r.map(String))];
  const widths = headers.map((_, i) => Math.max(...cells.map((r) => (r[i] ?? '').length)));
  return (
    cells
      .map((r) =>
        r
          .map((c, i) => (i === r.length - 1 ? c : c.padEnd(widths[i]!)))
          .join('  ')
          .trimEnd(),
      )
      .join('\n') + '\n'
  );
}

/** Commander argument parser for numbers with bounds; bad input becomes a usage error (exit 2). */
export function numberArg(opts: { int?: boolean; min?: number; max?: number; positive?: boolean } = {}) {
  return (value: string): number => {
    const n = Number(value);
    if (value.trim() === '' || !Number.isFinite(n)) throw new InvalidArgumentError('not a number.');
    if (opts.int && !Number.isInteger(n)) throw new InvalidArgumentError('must be a whole number.');
    if (opts.positive && n <= 0) throw new InvalidArgumentError('must be greater than 0.');
    if (opts.min !== undefined && n < opts.min) throw new InvalidArgumentError(`must be at least ${opts.min}.`);
    if (opts.max !== undefined && n > opts.max) throw new InvalidArgumentError(`must be at most ${opts.max}.`);
    return n;
  };
}

/** Collects repeated `--env K=V` into a map. */
export function keyValueArg(value: string, previous: Record<string, string> = {}): Record<string, string> {
  const i = value.indexOf('=');
  if (i <= 0) throw new InvalidArgumentError(`expected KEY=VALUE, got "${value}".`);
  return { ...previous, [value.slice(0, i)]: value.slice(i + 1) };
}

/** The examples block every verb's --help ends with. */
export function examples(...lines: string[]): string {
  return `\nExamples:\n${lines.map((l) => `  ${l}`).join('\n')}\n`;
}
