import React from 'react';
import { describe, expect, it } from 'vitest';
import { render } from 'ink-testing-library';
import { storeFrom, withStore } from '../test/tui/console.js';
import { setUi } from '../src/tui/store.js';
import { resolveView, VIEWS } from '../src/tui/views.js';
import { CommandBar, commandBarParts } from './CommandBar.js';

describe('CommandBar', () => {
  it('lists the views with their number keys and the filter in force', () => {
    const store = storeFrom();
    setUi(store, { view: 'sandboxes', filter: { sandboxes: 'node-a' } });
    const { lastFrame } = render(withStore(store, <CommandBar width={100} />));
    // 100 columns hold the nine views by their `:` words (the current one whole) and the filter.
    expect(lastFrame()).toBe('1:node 2:sandboxes 3:pool 4:ev 5:cfg 6:tri 7:tpl 8:snap 9:keys  filter: /node-a');
  });

  it('without a filter, every name where they fit, else the other views by their `:` words', () => {
    expect(commandBarParts('nodes', undefined, 100).tabs.join('')).toBe('1:nodes 2:sandboxes 3:pool 4:events 5:config 6:triage 7:templates 8:snapshots 9:keys');
    expect(commandBarParts('nodes', undefined, 80).tabs.join('')).toBe('1:nodes 2:sb 3:pool 4:ev 5:cfg 6:tri 7:tpl 8:snap 9:keys');
  });

  it("keeps the filter in force whole as the width shrinks: the hint goes, then the other views' names", () => {
    const store = storeFrom();
    // Wide enough (ink-testing-library draws 100 columns: the parts at 120), the hint too.
    const wide = commandBarParts('sandboxes', 'x', 120);
    expect(wide.tabs.join('') + wide.tail).toBe(
      '1:nodes 2:sandboxes 3:pool 4:events 5:config 6:triage 7:templates 8:snapshots 9:keys  filter: /x  (esc clears)',
    );
    setUi(store, { view: 'config', filter: { config: 'disk' } });
    const at = (width: number) => render(withStore(store, <CommandBar width={width} />)).lastFrame();
    // 80 columns: the other views by their `:` words (each picks its view), the current one whole.
    expect(at(80)).toBe('1:node 2:sb 3:pool 4:ev 5:config 6:tri 7:tpl 8:snap 9:keys  filter: /disk');
    for (const [i, word] of ['node', 'sb', 'pool', 'ev', 'config', 'tri', 'tpl', 'snap', 'keys'].entries()) expect(resolveView(word)).toBe(VIEWS[i]);
    // A longer filter: only the number keys are left.
    setUi(store, { view: 'config', filter: { config: 'disk_usage_max' } });
    expect(at(80)).toBe('1 2 3 4 5:config 6 7 8 9  filter: /disk_usage_max');
    // Narrower still: the tabs are cut before the filter, which is cut last.
    expect(at(30)).toBe('1 2 3  filter: /disk_usage_max');
    expect(at(20)).toBe('  filter: /disk_usag');
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
    expect(lastFrame()).toBe('1:nodes 2 3 4 5 6 7');
  });
});
