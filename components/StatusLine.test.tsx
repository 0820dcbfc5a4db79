import React from 'react';
import { describe, expect, it } from 'vitest';
import { render } from 'ink-testing-library';
import { storeFrom, withStore } from '../test/tui/console.js';
import { flash, setUi } from '../src/tui/store.js';
import { MAX_DETAIL, StatusLine, statusHeight } from './StatusLine.js';

describe('StatusLine', () => {
  it('shows the key hints of the view from the keymap, without actions in read-only', () => {
    const rw = render(withStore(storeFrom(), <StatusLine width={100} />));
    expect(rw.lastFrame()).toMatch(/^\? help  : command  \/ filter  q quit  tab view  R reload  r ratio  c cordon  u uncordon  d drain/);
    const ro = render(withStore(storeFrom(undefined, { readonly: true }), <StatusLine width={100} />));
    expect(ro.lastFrame()).toBe('? help  : command  / filter  q quit  tab view');
  });

  it('shows the outcome with its detail, capped', () => {
    const store = storeFrom();
    flash(store, 'config v3 loaded: 6 change(s)', 'ok', ['a: 1 -> 2', 'b: 1 -> 2', 'c: 1 -> 2', 'd: 1 -> 2', 'e: 1 -> 2', 'f: 1 -> 2']);
    const { lastFrame } = render(withStore(store, <StatusLine width={100} />));
    expect(lastFrame()!.split('\n')).toEqual(['config v3 loaded: 6 change(s)', '  a: 1 -> 2', '  b: 1 -> 2', '  c: 1 -> 2', '  ... 3 more']);
    expect(statusHeight(6)).toBe(1 + MAX_DETAIL);
  });

  it('shows the running action', () => {
    const store = storeFrom();
    setUi(store, { busy: 'drain node-a' });
    const { lastFrame } = render(withStore(store, <StatusLine width={100} />));
    expect(lastFrame()).toBe('drain node-a ...');
  });
});
