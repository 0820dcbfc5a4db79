// Text -> validated Config. Syntax errors and schema violations both come out as
// `path: reason` issues, so the daemon, cubectl and the reload result say the same thing.
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import YAML from 'yaml';
import { parse as parseToml, TomlError } from 'smol-toml';
import type { z } from 'zod';
import { CubeError } from '../errors.js';
import { formatPath, ROOTS, type ConfigFile } from './introspect.js';
import type { Config, CubeletConfig, MasterConfig } from './schema.js';

export const FILE_NAMES: Record<ConfigFile, string> = { master: 'cubemaster.yaml', cubelet: 'cubelet.toml' };

export interface ConfigIssue {
  path: string;
  message: string;
}

export type Parsed<T> = { ok: true; value: T } | { ok: false; errors: ConfigIssue[] };

type Value<F extends ConfigFile> = F extends 'master' ? MasterConfig : CubeletConfig;

/** Parses the file's syntax only; `undefined` text (no file) and an empty file mean "all defaults". */
export function parseSyntax(file: ConfigFile, text: string | undefined): Parsed<unknown> {
  const name = FILE_NAMES[file];
  if (text === undefined || text.trim() === '') return { ok: true, value: {} };
  if (file === 'master') {
    const doc = YAML.parseDocument(text);
    if (doc.errors.length > 0) return { ok: false, errors: doc.errors.map((e) => ({ path: name, message: firstLine(e.message) })) };
    const value: unknown = doc.toJS();
    if (value === null || value === undefined) return { ok: true, value: {} };
    if (typeof value !== 'object' || Array.isArray(value)) return { ok: false, errors: [{ path: name, message: 'must be a mapping of keys to values' }] };
    return { ok: true, value };
  }
  try {
    return { ok: true, value: parseToml(text) };
  } catch (e) {
    if (e instanceof TomlError)
      return {
        ok: false,
        errors: [{ path: name, message: `line ${e.line}, column ${e.column}: ${firstLine(e.message.replace(/^Invalid TOML document: /, ''))}` }],
      };
    throw e;
  }
}

export function validate<F extends ConfigFile>(file: F, value: unknown): Parsed<Value<F>> {
  const r = ROOTS[file].safeParse(value);
  if (r.success) return { ok: true, value: r.data as Value<F> };
  return { ok: false, errors: r.error.issues.flatMap(issueLines) };
}

export function parseConfigText<F extends ConfigFile>(file: F, text: string | undefined): Parsed<Value<F>> {
  const syntax = parseSyntax(file, text);
  return syntax.ok ? validate(file, syntax.value) : syntax;
}

function issueLines(issue: z.core.$ZodIssue): ConfigIssue[] {
  const path = issue.path.map((p) => (typeof p === 'symbol' ? String(p) : p));
  if (issue.code === 'unrecognized_keys') return issue.keys.map((k) => ({ path: formatPath([...path, k]), message: 'unknown key' }));
  return [{ path: path.length === 0 ? '(top level)' : formatPath(path), message: issue.message.replace(/^Invalid input: /, '') }];
}

function firstLine(s: string): string {
  return s.split('\n')[0]!.trim();
}

export function formatIssues(errors: readonly ConfigIssue[]): string {
  return errors.map((e) => `${e.path}: ${e.message}`).join('\n');
}

export function readIfExists(path: string): string | undefined {
  try {
    return readFileSync(path, 'utf8');
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw e;
  }
}

export function configPaths(dir: string): Record<ConfigFile, string> {
  return { master: join(dir, FILE_NAMES.master), cubelet: join(dir, FILE_NAMES.cubelet) };
}

/** Loads both files of a config dir; throws CONFIG_INVALID listing every `path: reason`. */
export function loadConfig(dir: string): Config {
  const paths = configPaths(dir);
  const master = parseConfigText('master', readIfExists(paths.master));
  const cubelet = parseConfigText('cubelet', readIfExists(paths.cubelet));
  const errors = [...(master.ok ? [] : master.errors), ...(cubelet.ok ? [] : cubelet.errors)];
  if (!master.ok || !cubelet.ok) throw new CubeError('CONFIG_INVALID', formatIssues(errors), { details: { errors } });
  return { master: master.value, cubelet: cubelet.value };
}

/** The package's root (where package.json is), from src/ under tsx/vitest or dist/src/ when built. */
export function packageRoot(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  while (!existsSync(join(dir, 'package.json'))) {
    const up = dirname(dir);
    if (up === dir) throw new Error('package.json not found above ' + fileURLToPath(import.meta.url));
    dir = up;
  }
  return dir;
}

export const ETC_CONFIG_DIR = '/etc/cubed';

/** --config-dir when given, else /etc/cubed when it exists, else the package's config/. */
export function resolveConfigDir(flag?: string, etcDir = ETC_CONFIG_DIR): string {
  if (flag !== undefined && flag !== '') {
    const dir = resolve(flag);
    if (!existsSync(dir)) throw new CubeError('CONFIG_INVALID', `config dir ${dir} does not exist`);
    return dir;
  }
  return existsSync(etcDir) ? etcDir : join(packageRoot(), 'config');
}
