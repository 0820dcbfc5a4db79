// Field-level difference between two configs: one ConfigChange per leaf that changed.
import { isDeepStrictEqual } from 'node:util';
import type { ConfigChange } from '../model/config.js';
import { formatPath, needsRestart, type ConfigFile } from './introspect.js';
import type { Config } from './schema.js';

const isPlainObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

export function diffConfig(from: Config, to: Config): ConfigChange[] {
  const out: ConfigChange[] = [];
  for (const file of ['master', 'cubelet'] as const) diffValue(file, [], from[file], to[file], out);
  return out;
}

function diffValue(file: ConfigFile, segs: string[], a: unknown, b: unknown, out: ConfigChange[]): void {
  // A table appearing or vanishing (e.g. the optional [quota]) is reported key by key.
  const tableA = isPlainObject(a) || (a === undefined && isPlainObject(b));
  const tableB = isPlainObject(b) || (b === undefined && isPlainObject(a));
  if (tableA && tableB) {
    const ra = (a ?? {}) as Record<string, unknown>;
    const rb = (b ?? {}) as Record<string, unknown>;
    for (const k of new Set([...Object.keys(ra), ...Object.keys(rb)])) diffValue(file, [...segs, k], ra[k], rb[k], out);
    return;
  }
  if (!isDeepStrictEqual(a, b)) out.push({ path: formatPath(segs), from: a, to: b, needsRestart: needsRestart(file, segs) });
}

/**
 * `base` with what changed from `from` to `to` (leaf by leaf): a file edit applied over a config
 * in force that is not the file's (a cluster's version) changes the keys edited, not the others.
 * Where `base` equals `from` the result is `to`.
 */
export function patchConfig(base: Config, from: Config, to: Config): Config {
  return {
    master: patchValue(base.master, from.master, to.master) as Config['master'],
    cubelet: patchValue(base.cubelet, from.cubelet, to.cubelet) as Config['cubelet'],
  };
}

function patchValue(base: unknown, from: unknown, to: unknown): unknown {
  if (isDeepStrictEqual(from, to)) return base;
  if (!isPlainObject(base) || !isPlainObject(from) || !isPlainObject(to)) return to;
  const out: Record<string, unknown> = { ...base };
  for (const k of new Set([...Object.keys(from), ...Object.keys(to)])) {
    const v = patchValue(base[k], from[k], to[k]);
    if (v === undefined) delete out[k];
    else out[k] = v;
  }
  return out;
}
