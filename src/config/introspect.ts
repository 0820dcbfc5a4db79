// Reads the zod schema as data: where a key lives, whether it needs a restart, its range and
// its description. The diff, `set`, the doc generator and the CLI all walk the schema here.
import type { z } from 'zod';
import { CubeletConfigSchema, MasterConfigSchema } from './schema.js';

export type ConfigFile = 'master' | 'cubelet';

export const ROOTS: Record<ConfigFile, z.ZodObject> = { master: MasterConfigSchema, cubelet: CubeletConfigSchema };

interface Meta {
  restart?: boolean;
  description?: string;
}

/** A schema with its wrappers (default, prefault, optional) peeled off, and what they said. */
export interface Unwrapped {
  base: z.ZodType;
  optional: boolean;
  restart: boolean;
  description?: string;
}

export function unwrap(schema: z.ZodType): Unwrapped {
  let s = schema;
  let optional = false;
  let restart = false;
  let description: string | undefined;
  for (;;) {
    const meta = s.meta() as Meta | undefined;
    if (meta?.restart) restart = true;
    description ??= meta?.description;
    const def = s.def as { type: string; innerType?: z.ZodType };
    if ((def.type === 'default' || def.type === 'prefault' || def.type === 'optional') && def.innerType) {
      if (def.type === 'optional') optional = true;
      s = def.innerType;
      continue;
    }
    return { base: s, optional, restart, ...(description === undefined ? {} : { description }) };
  }
}

function objectShape(s: z.ZodType): Record<string, z.ZodType> | undefined {
  return s.def.type === 'object' ? (s as z.ZodObject).shape : undefined;
}

function recordValue(s: z.ZodType): z.ZodType | undefined {
  return s.def.type === 'record' ? ((s as z.ZodRecord).def.valueType as z.ZodType) : undefined;
}

/** Which file a top-level key belongs to (the two files' keys are disjoint). */
export function fileOf(topKey: string): ConfigFile | undefined {
  if (topKey in MasterConfigSchema.shape) return 'master';
  if (topKey in CubeletConfigSchema.shape) return 'cubelet';
  return undefined;
}

/** Renders segments the way TOML writes keys: `plugins."io.cubelet.internal.v1.network".tap_init_num`. */
export function formatPath(segs: readonly (string | number)[]): string {
  return segs
    .map((s) => (typeof s === 'number' ? `[${s}]` : /^[A-Za-z0-9_-]+$/.test(s) ? s : JSON.stringify(s)))
    .join('.')
    .replace(/\.\[/g, '[');
}

function tokenize(raw: string): { text: string; quoted: boolean }[] {
  const out: { text: string; quoted: boolean }[] = [];
  let i = 0;
  while (i < raw.length) {
    if (raw[i] === '"') {
      const end = raw.indexOf('"', i + 1);
      if (end < 0) throw new Error(`${raw}: unterminated quote`);
      out.push({ text: raw.slice(i + 1, end), quoted: true });
      i = end + 1;
    } else {
      const end = raw.indexOf('.', i);
      const stop = end < 0 ? raw.length : end;
      out.push({ text: raw.slice(i, stop), quoted: false });
      i = stop;
    }
    if (i < raw.length) {
      if (raw[i] !== '.') throw new Error(`${raw}: expected "." after a quoted key`);
      i++;
      if (i === raw.length) throw new Error(`${raw}: ends with "."`);
    }
  }
  if (out.some((t) => t.text === '' && !t.quoted)) throw new Error(`${raw}: empty key`);
  return out;
}

export interface ResolvedPath {
  file: ConfigFile;
  segs: string[];
  /** The leaf's schema, unwrapped. */
  field: Unwrapped;
}

/**
 * Turns `host.quota.paused_resource_release_ratio` (or a TOML-style quoted path) into the
 * file and key segments. Unquoted dots inside a key name (plugin names) are matched against
 * the schema, longest key first. Throws with `path: reason`.
 */
export function resolvePath(raw: string): ResolvedPath {
  const toks = tokenize(raw.trim());
  const file = toks[0] ? fileOf(toks[0].text) : undefined;
  if (!file)
    throw new Error(
      `${raw}: unknown key (top-level keys: ${[...Object.keys(MasterConfigSchema.shape), ...Object.keys(CubeletConfigSchema.shape)].join(', ')})`,
    );
  const segs: string[] = [];
  let node = unwrap(ROOTS[file]);
  let i = 0;
  while (i < toks.length) {
    const shape = objectShape(node.base);
    const value = recordValue(node.base);
    let key: string | undefined;
    let used = 1;
    if (shape) {
      for (let n = toks.length - i; n >= 1 && key === undefined; n--) {
        const slice = toks.slice(i, i + n);
        if (n > 1 && slice.some((t) => t.quoted)) continue;
        const candidate = slice.map((t) => t.text).join('.');
        if (candidate in shape) {
          key = candidate;
          used = n;
        }
      }
      if (key === undefined) throw new Error(`${formatPath([...segs, toks[i]!.text])}: unknown key`);
      node = unwrap(shape[key]!);
    } else if (value) {
      key = toks[i]!.text;
      node = unwrap(value);
    } else {
      throw new Error(`${formatPath(segs)}: is a value, not a table`);
    }
    segs.push(key);
    i += used;
  }
  return { file, segs, field: node };
}

/** True when the field at `segs` (or a table above it) is marked `.meta({ restart: true })`. */
export function needsRestart(file: ConfigFile, segs: readonly string[]): boolean {
  let node = unwrap(ROOTS[file]);
  if (node.restart) return true;
  for (const seg of segs) {
    const shape = objectShape(node.base);
    const next = shape ? shape[seg] : recordValue(node.base);
    if (!next) return false;
    node = unwrap(next);
    if (node.restart) return true;
  }
  return false;
}

export interface Leaf {
  segs: string[];
  field: Unwrapped;
}

/** Every documented setting: object fields are descended, everything else (records too) is a leaf. */
export function leaves(file: ConfigFile): Leaf[] {
  const out: Leaf[] = [];
  const walk = (schema: z.ZodType, segs: string[]) => {
    const u = unwrap(schema);
    const shape = objectShape(u.base);
    if (shape) for (const [k, v] of Object.entries(shape)) walk(v, [...segs, k]);
    else out.push({ segs, field: u });
  };
  walk(ROOTS[file], []);
  return out;
}

/** A human description of the values a field accepts: type, range, choices. */
export function describeRange(s: z.ZodType): string {
  const def = s.def as { type: string; checks?: { _zod: { def: Record<string, unknown> } }[] };
  switch (def.type) {
    case 'number': {
      const checks = (def.checks ?? []).map((c) => c._zod.def);
      const int = checks.some((c) => c.check === 'number_format' && String(c.format).includes('int'));
      const parts: string[] = [];
      for (const c of checks) {
        if (c.check === 'greater_than') parts.push(`${c.inclusive ? '>=' : '>'} ${c.value}`);
        if (c.check === 'less_than') parts.push(`${c.inclusive ? '<=' : '<'} ${c.value}`);
      }
      return [int ? 'integer' : 'number', ...parts].join(', ');
    }
    case 'string': {
      const format = (def as { format?: string }).format;
      if (format === 'ipv4' || format === 'ipv6') return `${format === 'ipv4' ? 'IPv4' : 'IPv6'} address`;
      const fmt = (def.checks ?? []).map((c) => c._zod.def).find((c) => c.check === 'string_format' || c.check === 'min_length');
      if (fmt?.check === 'min_length') return 'non-empty string';
      return fmt?.pattern ? `string matching \`${String(fmt.pattern)}\`` : 'string';
    }
    case 'boolean':
      return 'true or false';
    case 'enum':
      return `one of ${(s as z.ZodEnum).options.map((o) => `\`${String(o)}\``).join(', ')}`;
    case 'array': {
      const el = unwrap((s as z.ZodArray).def.element as z.ZodType).base;
      return el.def.type === 'enum' ? `list of any of ${describeRange(el).replace(/^one of /, '')}` : `list of ${describeRange(el)}`;
    }
    case 'record': {
      const r = s as z.ZodRecord;
      const key = r.def.keyType as z.ZodType;
      return `map from ${key.def.type === 'enum' ? describeRange(key).replace(/^one of /, '') : 'name'} to ${describeRange(unwrap(r.def.valueType as z.ZodType).base)}`;
    }
    case 'union':
      return (s as z.ZodUnion).options.map((o) => describeRange(unwrap(o as z.ZodType).base)).join(', or ');
    case 'unknown':
      return 'any value';
    default:
      return def.type;
  }
}

/**
 * The leaves of a config tree with their key segments (plugin names hold dots, so segments, not
 * one dotted string); arrays and empty tables are leaves. The console's config rows and the
 * store's list of what the files set walk the same way, so their paths agree.
 */
export function leafValues(v: unknown, segs: string[] = []): { segs: string[]; value: unknown }[] {
  if (v !== null && typeof v === 'object' && !Array.isArray(v) && Object.keys(v).length > 0) {
    return Object.entries(v).flatMap(([k, x]) => leafValues(x, [...segs, k]));
  }
  return [{ segs, value: v }];
}
