import React from 'react';
import { describe, expect, it } from 'vitest';
import { render } from 'ink-testing-library';
import { storeFrom, withStore } from '../test/tui/console.js';
import { flash, setUi } from '../src/tui/store.js';
import { MAX_DETAIL, StatusLine, statusHeight } from './StatusLine.js';

describe('StatusLine', () => {
  it('shows the key hints of the view from the keymap, without actions in read-only', () => {
    const rw = render(withStore(storeFrom(), <StatusLine width={100} />));
    // Whole hints that fit 100 columns: the view's own actions are kept before general ones.
    expect(rw.lastFrame()).toBe('? help  : command  / filter  q quit  s sort  enter describe  c cordon  u uncordon  d drain  n launch');
    const ro = render(withStore(storeFrom(undefined, { readonly: true }), <StatusLine width={100} />));
    expect(ro.lastFrame()).toBe('? help  : command  / filter  q quit  s sort  tab view  enter describe');
  });

  it('shows the outcome with its detail, capped', () => {
    const store = storeFrom();
    flash(store, 'config v3 loaded: 6 change(s)', 'ok', ['a: 1 -> 2', 'b: 1 -> 2', 'c: 1 -> 2', 'd: 1 -> 2', 'e: 1 -> 2', 'f: 1 -> 2']);
    const { lastFrame } = render(withStore(store, <StatusLine width={100} />));
    expect(lastFrame()!.split('\n')).toEqual(['config v3 loaded: 6 change(s)', '  a: 1 -> 2', '  b: 1 -> 2', '  c: 1 -> 2', '  ... 3 more']);
    expect(statusHeight(store.getState().ui.flash, false, 100)).toBe(1 + MAX_DETAIL);
  });

  it('wraps a long outcome instead of cutting its end (a 130597 names every node and rule)', () => {
    const store = storeFrom();
    const text = 'launch failed: no node available: node-a: cpu util 94.8% >= 80%; node-b: disk 83% >= 80%';
    flash(store, text, 'bad');
    const { lastFrame } = render(withStore(store, <StatusLine width={40} />));
    const lines = lastFrame()!.split('\n');
    expect(lines.join(' ')).toBe(text);
    for (const l of lines) expect(l.length).toBeLessThanOrEqual(40);
    expect(statusHeight(store.getState().ui.flash, false, 40)).toBe(lines.length);
  });

  it('shows the running action', () => {
    const store = storeFrom();
    setUi(store, { busy: 'drain node-a' });
    const { lastFrame } = render(withStore(store, <StatusLine width={100} />));
    expect(lastFrame()).toBe('drain node-a ...');
  });
});
