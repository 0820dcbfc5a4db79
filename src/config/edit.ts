// Setting one key in a config file's text while keeping the operator's comments and layout.
// YAML: the value's characters are replaced in place when it is a scalar or a flow list/map,
// else the yaml Document API re-renders the file (comments kept, their alignment not).
// TOML (smol-toml has no document API): the value is replaced on its line (keeping a
// trailing comment), or the key added to its table; when that cannot be done safely
// (multi-line values, inline or array tables, table values) the file is re-serialised,
// which keeps every value but drops comments.
import { isDeepStrictEqual } from 'node:util';
import YAML from 'yaml';
import { parse as parseToml, stringify as stringifyToml } from 'smol-toml';
import type { ConfigFile } from './introspect.js';

export interface Edit {
  text: string;
  /** False when the TOML file had to be re-serialised and its comments were lost. */
  commentsKept: boolean;
}

export function setInText(file: ConfigFile, text: string | undefined, segs: readonly string[], value: unknown): Edit {
  return file === 'master' ? setYaml(text ?? '', segs, value) : setToml(text ?? '', segs, value);
}

function setYaml(text: string, segs: readonly string[], value: unknown): Edit {
  const doc = YAML.parseDocument(text);
  if (doc.errors.length > 0) throw new Error(`cubemaster.yaml: ${doc.errors[0]!.message.split('\n')[0]}`);
  const expected = setPath((doc.toJS() ?? {}) as Table, segs, value);
  // Splicing the new value over the old one's characters keeps everything else byte for
  // byte (comment alignment too, which re-rendering the document would not).
  const existing = doc.getIn(segs, true);
  const inline = YAML.isScalar(existing) || ((YAML.isSeq(existing) || YAML.isMap(existing)) && existing.flow === true);
  if (inline && existing.range) {
    const rendered = typeof value === 'string' ? YAML.stringify(value, { lineWidth: 0 }).trimEnd() : JSON.stringify(value);
    const spliced = text.slice(0, existing.range[0]) + rendered + text.slice(existing.range[1]);
    try {
      if (!rendered.includes('\n') && sameData(YAML.parse(spliced), expected)) return { text: spliced, commentsKept: true };
    } catch {
      // fall through to re-rendering the document
    }
  }
  doc.setIn(segs, doc.createNode(value));
  return { text: String(doc), commentsKept: true };
}

type Table = Record<string, unknown>;

function setPath(obj: Table, segs: readonly string[], value: unknown): Table {
  const [head, ...rest] = segs;
  if (head === undefined) return obj;
  const child = obj[head];
  const next = rest.length === 0 ? value : setPath(typeof child === 'object' && child !== null && !Array.isArray(child) ? (child as Table) : {}, rest, value);
  return { ...obj, [head]: next };
}

/** smol-toml builds null-prototype objects: compare data, not prototypes. */
const sameData = (a: unknown, b: unknown): boolean => isDeepStrictEqual(JSON.parse(JSON.stringify(a)), JSON.parse(JSON.stringify(b)));

function setToml(text: string, segs: readonly string[], value: unknown): Edit {
  const before = text.trim() === '' ? {} : (parseToml(text) as Table);
  const expected = setPath(before, segs, value);
  const edited =
    typeof value === 'object' && value !== null && !Array.isArray(value) ? undefined : editTomlLines(text, segs.slice(0, -1), segs[segs.length - 1]!, value);
  if (edited !== undefined) {
    try {
      if (sameData(parseToml(edited), expected)) return { text: edited, commentsKept: true };
    } catch {
      // fall through to a full rewrite
    }
  }
  return { text: stringifyToml(expected), commentsKept: false };
}

const BARE = /^[A-Za-z0-9_-]+$/;
const tomlKey = (k: string): string => (BARE.test(k) ? k : JSON.stringify(k));
const tomlValue = (v: unknown): string => stringifyToml({ v }).trim().replace(/^v = /, '');

/** `[a."b.c"]` -> ['a', 'b.c']; undefined for anything it does not understand (array tables...). */
function headerPath(line: string): string[] | undefined {
  const m = /^\s*\[([^[\]]+)\]\s*(#.*)?$/.exec(line);
  if (!m) return undefined;
  try {
    const probe = parseToml(`[${m[1]}]\n__probe = 1`) as Table;
    const segs: string[] = [];
    let t: unknown = probe;
    while (typeof t === 'object' && t !== null && !('__probe' in t)) {
      const keys = Object.keys(t);
      if (keys.length !== 1) return undefined;
      segs.push(keys[0]!);
      t = (t as Table)[keys[0]!];
    }
    return segs;
  } catch {
    return undefined;
  }
}

function editTomlLines(text: string, table: readonly string[], key: string, value: unknown): string | undefined {
  const lines = text.split('\n');
  const rendered = `${tomlKey(key)} = ${tomlValue(value)}`;
  let current: string[] | undefined = [];
  let tableStart = -1; // index of the header line (-1 for the root table: new keys go first)
  let lastInTable = -1; // last non-blank line of the target table
  let tableFound = table.length === 0;
  const keyRe = new RegExp(`^(\\s*)(${escapeRe(key)}|"${escapeRe(key)}")\\s*=\\s*(.*)$`);
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i]!;
    if (/^\s*\[/.test(line)) {
      current = headerPath(line);
      if (current && isDeepStrictEqual(current, table)) {
        tableFound = true;
        tableStart = i;
        lastInTable = i;
      }
      continue;
    }
    if (!current || !isDeepStrictEqual(current, table)) continue;
    if (line.trim() !== '' && !line.trim().startsWith('#')) lastInTable = i;
    const m = keyRe.exec(line);
    if (!m) continue;
    const comment = trailingComment(m[3]!);
    if (comment === undefined) return undefined;
    lines[i] = `${m[1]}${rendered}${comment}`;
    return lines.join('\n');
  }
  if (!tableFound) {
    const header = `[${table.map(tomlKey).join('.')}]`;
    return `${text.replace(/\n*$/, '')}\n\n${header}\n${rendered}\n`;
  }
  lines.splice(Math.max(lastInTable, tableStart) + 1, 0, rendered);
  return lines.join('\n');
}

/** The ` # comment` after a one-line value ('' when none), or undefined when the value spans lines. */
function trailingComment(rest: string): string | undefined {
  const probe = (v: string) => {
    try {
      parseToml(`v = ${v}`);
      return true;
    } catch {
      return false;
    }
  };
  for (let i = rest.indexOf('#'); i >= 0; i = rest.indexOf('#', i + 1)) {
    if (probe(rest.slice(0, i))) return ' ' + rest.slice(i);
  }
  return probe(rest) ? '' : undefined;
}

function escapeRe(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}
