import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import type { Key } from 'ink';
import { bindings, helpSections, hintLine, KEYMAP, keyName, keymapMarkdown, resolveKey, splitKeys } from '../../src/tui/keymap.js';
import { resolveView } from '../../src/tui/views.js';

const key = (k: Partial<Key>): Key => ({
  upArrow: false,
  downArrow: false,
  leftArrow: false,
  rightArrow: false,
  pageDown: false,
  pageUp: false,
  home: false,
  end: false,
  return: false,
  escape: false,
  ctrl: false,
  shift: false,
  tab: false,
  backspace: false,
  delete: false,
  meta: false,
  super: false,
  hyper: false,
  capsLock: false,
  numLock: false,
  ...k,
});

describe('keymap', () => {
  it('no key is bound twice in the same view', () => {
    for (const view of ['nodes', 'sandboxes', 'pool', 'events', 'config', 'triage'] as const) {
      const seen = new Map<string, string>();
      for (const b of KEYMAP.filter((x) => !x.views || x.views.includes(view))) {
        for (const k of b.keys) {
          expect(seen.get(k), `${k} in ${view}`).toBeUndefined();
          seen.set(k, b.id);
        }
      }
    }
  });

  it('--readonly does not bind dangerous keys, and help and hints do not show them', () => {
    const dangerous = KEYMAP.filter((b) => b.dangerous);
    expect(dangerous.map((b) => b.id).sort()).toEqual(
      ['cordon', 'destroy', 'drain', 'editConfig', 'exec', 'launch', 'pause', 'releaseRatio', 'reload', 'shell', 'uncordon'].sort(),
    );
    for (const b of dangerous) {
      for (const k of b.keys) for (const v of b.views ?? (['nodes'] as const)) expect(resolveKey(k, v, true)).toBeNull();
    }
    const helpText = JSON.stringify(helpSections(true));
    for (const b of dangerous) expect(helpText).not.toContain(b.help);
    expect(hintLine('nodes', true)).not.toMatch(/drain|reload/);
    expect(hintLine('nodes', false)).toMatch(/d drain/);
    // At 80 columns whole hints only: help first, then the view's own actions.
    const narrow = hintLine('sandboxes', false, 80);
    expect(narrow.length).toBeLessThanOrEqual(80);
    expect(narrow).toMatch(/^\? help .*space mark .*ctrl-d destroy/);
    expect(narrow.split('  ').every((h) => hintLine('sandboxes', false).split('  ').includes(h))).toBe(true);
    expect(bindings(false).length).toBe(KEYMAP.length);
  });

  it('resolves keys per view', () => {
    expect(resolveKey('d', 'nodes', false)?.id).toBe('drain');
    expect(resolveKey('d', 'sandboxes', false)).toBeNull();
    expect(resolveKey('ctrl-d', 'sandboxes', false)?.id).toBe('destroy');
    expect(resolveKey('3', 'events', true)?.id).toBe('view:pool');
    expect(resolveKey('/', 'triage', false)).toBeNull();
  });

  it.each([
    ['', { upArrow: true }, 'up'],
    ['', { tab: true, shift: true }, 'shift-tab'],
    ['', { escape: true, meta: true }, 'escape'],
    ['d', { ctrl: true }, 'ctrl-d'],
    ['c', { ctrl: true }, 'ctrl-c'],
    [' ', {}, 'space'],
    ['R', { shift: true }, 'R'],
    ['', { delete: true }, 'backspace'],
  ] as const)('keyName(%j, %j) = %s', (input, k, want) => expect(keyName(input, key(k))).toBe(want));

  it.each([
    ['sb', 'sandboxes'],
    ['node', 'nodes'],
    ['ev', 'events'],
    ['p', 'pool'],
    ['triage', 'triage'],
    ['x', null],
    ['', null],
  ])('resolveView(%s) = %s', (w, want) => expect(resolveView(w)).toBe(want));

  it('docs/console.md carries the key reference generated from the keymap', () => {
    const doc = readFileSync(new URL('../../docs/console.md', import.meta.url), 'utf8');
    expect(doc).toContain(keymapMarkdown());
  });
});

describe('splitKeys', () => {
  it.each([
    ['jjj', ['j', 'j', 'j']],
    ['\x150.75\r', ['ctrl-u', '0', '.', '7', '5', 'enter']],
    [':q!\r\n', [':', 'q', '!', 'enter']],
    ['a b\t\x7f\x04', ['a', 'space', 'b', 'tab', 'backspace', 'ctrl-d']],
    ['\x00x', ['x']],
  ])('%j', (chunk, names) => {
    expect(splitKeys(chunk).map((k) => k.name)).toEqual(names);
  });
});
