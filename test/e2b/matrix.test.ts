// Keeps docs/e2b.md's compatibility matrix true to the SDKs installed: every public method of
// the `e2b` and `@e2b/code-interpreter` classes (found by reflection, minus what their type
// declarations mark private or protected) has a row, every row names a method that exists, and
// every test file a row names exists. An SDK upgrade that adds a call fails here until the
// matrix says what that call does against cubed.
import { existsSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, resolve } from 'node:path';
import { Sandbox as CodeInterpreter } from '@e2b/code-interpreter';
import { Sandbox, Secret, Template, TemplateBase, Volume } from 'e2b';
import { describe, expect, it } from 'vitest';

const ROOT = resolve(import.meta.dirname, '../..');
const require = createRequire(import.meta.url);
const typesOf = (pkg: string) => readFileSync(join(dirname(require.resolve(pkg)), 'index.d.ts'), 'utf8');
const E2B = typesOf('e2b');
const CI = typesOf('@e2b/code-interpreter');

/** The text of a class's declaration. */
function declaration(types: string, className: string): string {
  const start = types.search(new RegExp(`^declare (abstract )?class ${className}\\b`, 'm'));
  if (start < 0) throw new Error(`no declaration of class ${className}`);
  return types.slice(start, types.indexOf('\n}', start));
}

/** Names a class's declaration marks private or protected: `static:NAME` for static members. */
function hidden(types: string, className: string): Set<string> {
  const out = new Set<string>();
  for (const m of declaration(types, className).matchAll(/^\s*(?:private|protected)\s+(static\s+)?(?:readonly\s+)?(?:get\s+)?(\w+)/gm)) {
    out.add(`${m[1] ? 'static:' : ''}${m[2]}`);
  }
  return out;
}

interface Surface {
  /** The matrix's spelling of a call on it: `Sandbox.`, `sbx.files.`, `Template().` ... */
  prefix: string;
  /** The object whose own functions are the calls, and those of its prototypes up to `stop`. */
  of: object;
  stop: object | null;
  static: boolean;
  /** [declarations, class] pairs whose private and protected members are left out. */
  classes: [string, string][];
}

const sbx = new Sandbox({ sandboxId: 'matrix', apiKey: 'e2b_matrix', envdVersion: '0.6.4' } as never) as Sandbox;
const proto = (o: object): object => Object.getPrototypeOf(o) as object;
const SANDBOX: [string, string][] = [
  [E2B, 'Sandbox'],
  [E2B, 'SandboxApi'],
  [E2B, 'ClientFactory'],
];
const PAGINATOR: [string, string][] = [[E2B, 'Paginator']];
const SURFACES: Surface[] = [
  { prefix: 'Sandbox.', of: Sandbox, stop: Function.prototype, static: true, classes: SANDBOX },
  { prefix: 'sbx.', of: Sandbox.prototype, stop: Object.prototype, static: false, classes: SANDBOX },
  { prefix: 'sbx.files.', of: proto(sbx.files), stop: Object.prototype, static: false, classes: [[E2B, 'Filesystem']] },
  { prefix: 'sbx.commands.', of: proto(sbx.commands), stop: Object.prototype, static: false, classes: [[E2B, 'Commands']] },
  { prefix: 'sbx.pty.', of: proto(sbx.pty), stop: Object.prototype, static: false, classes: [[E2B, 'Pty']] },
  { prefix: 'sbx.git.', of: proto(sbx.git), stop: Object.prototype, static: false, classes: [[E2B, 'Git']] },
  { prefix: 'Sandbox.list().', of: proto(Sandbox.list()), stop: Object.prototype, static: false, classes: [...PAGINATOR, [E2B, 'SandboxPaginator']] },
  {
    prefix: 'Sandbox.listSnapshots().',
    of: proto(Sandbox.listSnapshots()),
    stop: Object.prototype,
    static: false,
    classes: [...PAGINATOR, [E2B, 'SnapshotPaginator']],
  },
  {
    prefix: 'Template.',
    of: TemplateBase,
    stop: Function.prototype,
    static: true,
    classes: [
      [E2B, 'TemplateBase'],
      [E2B, 'ClientFactory'],
    ],
  },
  { prefix: 'Template().', of: proto(Template()), stop: Object.prototype, static: false, classes: [[E2B, 'TemplateBase']] },
  {
    prefix: 'Volume.',
    of: Volume,
    stop: Function.prototype,
    static: true,
    classes: [
      [E2B, 'Volume'],
      [E2B, 'ClientFactory'],
    ],
  },
  { prefix: 'vol.', of: Volume.prototype, stop: Object.prototype, static: false, classes: [[E2B, 'Volume']] },
  {
    prefix: 'Secret.',
    of: Secret,
    stop: Function.prototype,
    static: true,
    classes: [
      [E2B, 'Secret'],
      [E2B, 'ClientFactory'],
    ],
  },
  { prefix: 'Secret.list().', of: proto(Secret.list()), stop: Object.prototype, static: false, classes: [...PAGINATOR, [E2B, 'SecretPaginator']] },
  // The code interpreter's own calls; what it inherits from e2b's Sandbox is above.
  { prefix: 'sbx.', of: CodeInterpreter.prototype, stop: Sandbox.prototype, static: false, classes: [[CI, 'Sandbox']] },
  { prefix: 'Sandbox.', of: CodeInterpreter, stop: Sandbox, static: true, classes: [[CI, 'Sandbox']] },
];

/**
 * Classes the SDK does not export and makes only around a live stream, so their methods are read
 * from their declarations (the public, non-static ones).
 */
const DECLARED: [string, string, string][] = [
  ['handle.', E2B, 'CommandHandle'],
  ['watcher.', E2B, 'WatchHandle'],
];

function declaredMethods(types: string, className: string): string[] {
  return [...declaration(types, className).matchAll(/^ {2}(\w+)(?:<[^>]*>)?\(/gm)].map((m) => m[1]!).filter((n) => n !== 'constructor');
}

/** `prefix + name` of every public method of the SDKs, by reflection (and declarations, see DECLARED). */
function sdkCalls(): Set<string> {
  const calls = new Set<string>();
  for (const [prefix, types, cls] of DECLARED) for (const name of declaredMethods(types, cls)) calls.add(prefix + name);
  for (const s of SURFACES) {
    const skip = new Set<string>();
    for (const [types, cls] of s.classes) for (const h of hidden(types, cls)) skip.add(h);
    for (let o: object | null = s.of; o && o !== s.stop; o = Object.getPrototypeOf(o) as object | null) {
      for (const name of Object.getOwnPropertyNames(o)) {
        if (name === 'constructor' || name.startsWith('_')) continue;
        if (typeof Object.getOwnPropertyDescriptor(o, name)?.value !== 'function') continue; // getters and fields are no calls
        if (skip.has(s.static ? `static:${name}` : name)) continue;
        calls.add(s.prefix + name);
      }
    }
  }
  return calls;
}

interface Row {
  call: string;
  status: string;
  test: string;
}

/** The rows of docs/e2b.md's "## Compatibility matrix" section. */
function matrix(): Row[] {
  const doc = readFileSync(join(ROOT, 'docs/e2b.md'), 'utf8');
  const start = doc.indexOf('\n## Compatibility matrix\n');
  expect(start, 'docs/e2b.md has a "## Compatibility matrix" section').toBeGreaterThan(0);
  const next = doc.indexOf('\n## ', start + 1);
  const rows: Row[] = [];
  for (const line of doc.slice(start, next < 0 ? undefined : next).split('\n')) {
    const m = /^\| `([^`]+)` \|/.exec(line);
    if (!m) continue;
    const cells = line
      .split('|')
      .slice(1, -1)
      .map((c) => c.trim()); // JS, Python, status, how, test
    rows.push({ call: m[1]!, status: cells.length === 5 ? cells[2]! : `${cells.length} cells, not 5`, test: cells[4] ?? '' });
  }
  return rows;
}

describe('the compatibility matrix in docs/e2b.md', () => {
  const rows = matrix();
  const calls = sdkCalls();

  it('finds the SDK surfaces (reflection still works on this SDK version)', () => {
    expect(calls.size).toBeGreaterThan(100);
    for (const c of [
      'Sandbox.create',
      'sbx.files.write',
      'sbx.commands.run',
      'Template.build',
      'Template().fromImage',
      'vol.readFile',
      'sbx.runCode',
      'handle.wait',
      'watcher.stop',
    ]) {
      expect(calls).toContain(c);
    }
    expect(calls).not.toContain('sbx.commands.start'); // private in the declarations
    expect(calls).not.toContain('Template().build'); // private; Template.build is public
  });

  it('has a row for every public SDK call', () => {
    const listed = new Set(rows.map((r) => r.call));
    expect([...calls].filter((c) => !listed.has(c)).sort(), 'SDK calls with no row in the matrix').toEqual([]);
  });

  it('has no row for a call the SDK does not have, and one row per call', () => {
    expect(
      rows.map((r) => r.call).filter((c) => !calls.has(c)),
      'rows naming no SDK call',
    ).toEqual([]);
    const seen = new Set<string>();
    expect(
      rows.map((r) => r.call).filter((c) => seen.has(c) || !seen.add(c)),
      'rows listed twice',
    ).toEqual([]);
  });

  it('says works, refused or not yet, and names test files that exist', () => {
    expect(rows.filter((r) => !['works', 'refused', 'not yet'].includes(r.status)).map((r) => `${r.call}: ${r.status}`)).toEqual([]);
    const missing = rows.filter((r) => r.test !== '—' && !(/^`test\/[\w/.-]+\.test\.tsx?`$/.test(r.test) && existsSync(join(ROOT, r.test.slice(1, -1)))));
    expect(
      missing.map((r) => `${r.call}: ${r.test}`),
      'rows naming a test file that does not exist',
    ).toEqual([]);
  });
});
