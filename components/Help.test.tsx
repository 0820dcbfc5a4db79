import React from 'react';
import { describe, expect, it } from 'vitest';
import { render } from 'ink-testing-library';
import { storeFrom, withStore } from '../test/tui/console.js';
import { KEYMAP } from '../src/tui/keymap.js';
import { Help, helpLines } from './Help.js';
import { helpSections } from '../src/tui/keymap.js';

describe('Help', () => {
  it('lists every binding of the keymap, dangerous ones only when writable', () => {
    const all = helpLines(false).map((l) => l.text).join('\n');
    for (const b of KEYMAP) expect(all).toContain(b.help);
    const ro = helpLines(true).map((l) => l.text).join('\n');
    for (const b of KEYMAP) (b.dangerous ? expect(ro).not : expect(ro)).toContain(b.help);
  });

  it('flows into columns to fit the height, every line within the width', () => {
    const { lastFrame } = render(withStore(storeFrom(), <Help height={18} width={100} />));
    const lines = lastFrame()!.split('\n');
    expect(lines.length).toBeLessThanOrEqual(18);
    expect(lines[0]).toMatch(/^Keys   esc or \? closes/);
    expect(lastFrame()).toMatch(/General .*Navigation|Navigation .*General/s);
    for (const l of lines) expect(l.length).toBeLessThanOrEqual(100);
  });

  it('wraps long descriptions instead of cutting them (100 columns, the width of the test renderer)', () => {
    const { lastFrame } = render(withStore(storeFrom(), <Help height={35} width={100} />));
    const frame = lastFrame()!;
    const lines = frame.split('\n');
    expect(lines.length).toBeLessThanOrEqual(35);
    for (const l of lines) expect(l.length).toBeLessThanOrEqual(100);
    const shown = new Set(frame.split(/\s+/));
    for (const s of helpSections(false)) for (const r of s.rows) for (const w of r.help.split(' ')) expect(shown).toContain(w);
  });
});
