import React from 'react';
import { describe, expect, it } from 'vitest';
import { render } from 'ink-testing-library';
import { storeFrom, withStore } from '../test/tui/console.js';
import { setUi } from '../src/tui/store.js';
import { ConfigView } from './ConfigView.js';

describe('ConfigView', () => {
  it('shows the version, the files and the config as path/value lines', () => {
    const store = storeFrom();
    setUi(store, { filter: { config: 'ratio' } });
    const { lastFrame } = render(withStore(store, <ConfigView height={10} width={100} />));
    const lines = lastFrame()!.split('\n');
    expect(lines[0]).toBe('config v2 loaded 2026-11-30T05:30:00.000Z  files: /etc/cubed/cubemaster.yaml /etc/cubed/cubelet.toml');
    expect(lines.slice(2)).toEqual([expect.stringMatching(/^master\.host\.quota\.mem_oversell_ratio +2$/), expect.stringMatching(/^master\.host\.quota\.cpu_oversell_ratio +3$/), expect.stringMatching(/^master\.host\.quota\.paused_resource_release_ratio +0\.75$/)]);
  });

  it('says so before the config arrives', () => {
    const { lastFrame } = render(withStore(storeFrom([]), <ConfigView height={5} width={100} />));
    expect(lastFrame()).toContain('config not received yet');
  });
});
