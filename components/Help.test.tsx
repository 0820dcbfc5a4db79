import React from 'react';
import { describe, expect, it } from 'vitest';
import { render } from 'ink-testing-library';
import { storeFrom, withStore } from '../test/tui/console.js';
import { KEYMAP } from '../src/tui/keymap.js';
import { Help, helpLines } from './Help.js';
import { paneLines } from './Pane.js';

describe('Help', () => {
  it('lists every binding of the keymap, dangerous ones only when writable', () => {
    const all = helpLines(false).join('\n');
    for (const b of KEYMAP) expect(all).toContain(b.help);
    const ro = helpLines(true).join('\n');
    for (const b of KEYMAP) (b.dangerous ? expect(ro).not : expect(ro)).toContain(b.help);
  });

  it('at 80 columns wraps descriptions under their column and scrolls instead of cutting', () => {
    const lines = paneLines(helpLines(false), 80, 17);
    for (const l of lines) expect(l.length).toBeLessThanOrEqual(80);
    // Every word of every description is on screen somewhere (nothing cut to 8 characters).
    const words = new Set(lines.join(' ').split(/\s+/));
    for (const b of KEYMAP) for (const w of b.help.split(' ')) expect(words).toContain(w);
    const cont = lines.find((l) => l.startsWith(' '.repeat(17)) && l.trim().length > 0);
    expect(cont).toBeDefined();
  });

  it('shows a window with its position, and the end when scrolled past it', () => {
    const top = render(withStore(storeFrom(), <Help height={10} width={80} offset={0} />)).lastFrame()!;
    const total = paneLines(helpLines(false), 80, 17).length;
    expect(top.split('\n')[0]).toBe(`Keys  1-9 of ${total}, j/k scroll   esc closes`);
    expect(top.split('\n')[1]).toBe('General');
    const end = render(withStore(storeFrom(), <Help height={10} width={80} offset={9999} />)).lastFrame()!;
    expect(end.split('\n')[0]).toBe(`Keys  ${total - 8}-${total} of ${total}, j/k scroll   esc closes`);
    for (const l of end.split('\n')) expect(l.length).toBeLessThanOrEqual(80);
  });
});
