import React from 'react';
import { describe, expect, it } from 'vitest';
import { render } from 'ink-testing-library';
import { storeFrom, withStore } from '../test/tui/console.js';
import { setUi } from '../src/tui/store.js';
import { CommandBar } from './CommandBar.js';

describe('CommandBar', () => {
  it('lists the views with their number keys and the filter in force', () => {
    const store = storeFrom();
    setUi(store, { view: 'sandboxes', filter: { sandboxes: 'node-a' } });
    const { lastFrame } = render(withStore(store, <CommandBar width={100} />));
    expect(lastFrame()).toBe('1:nodes 2:sandboxes 3:pool 4:events 5:config 6:triage  filter: /node-a  (esc clears)');
  });

  it('shows the command or filter being typed', () => {
    const store = storeFrom();
    setUi(store, { overlay: { kind: 'command', text: 'sb' } });
    const { lastFrame, rerender } = render(withStore(store, <CommandBar width={100} />));
    expect(lastFrame()).toBe(':sb_');
    setUi(store, { overlay: { kind: 'filter', text: 'paused' } });
    rerender(withStore(store, <CommandBar width={100} />));
    expect(lastFrame()).toBe('/paused_');
  });

  it('cuts to the width', () => {
    const { lastFrame } = render(withStore(storeFrom(), <CommandBar width={20} />));
    expect(lastFrame()).toBe('1:nodes 2:sandboxes');
  });
});
