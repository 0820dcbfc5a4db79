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
    expect(lines.slice(2)).toEqual([expect.stringMatching(/^master\.host\.quota\.mem_oversell_ratio +live +2$/), expect.stringMatching(/^master\.host\.quota\.cpu_oversell_ratio +live +3$/), expect.stringMatching(/^master\.host\.quota\.paused_resource_release_ratio +live +0\.75$/)]);
  });

  it('marks the keys whose new value waits for a restart (the schema says which)', () => {
    const store = storeFrom();
    const config = store.getState().data.config!;
    store.setState((s) => ({ data: { ...s.data, config: { ...config, master: { api: { listen: '127.0.0.1:3000' } }, cubelet: { plugins: { 'io.cubelet.internal.v1.network': { tap_init_num: 32 } } } } } }));
    const { lastFrame } = render(withStore(store, <ConfigView height={10} width={80} />));
    expect(lastFrame()).toMatch(/^master\.api\.listen +restart +127\.0\.0\.1:3000$/m);
    expect(lastFrame()).toMatch(/^cubelet\.plugins\.io\.cubelet\.internal\.v1\.network\.tap_\S* +restart +32$/m);
    for (const l of lastFrame()!.split('\n')) expect(l.length).toBeLessThanOrEqual(80);
  });

  it('says so before the config arrives', () => {
    const { lastFrame } = render(withStore(storeFrom([]), <ConfigView height={5} width={100} />));
    expect(lastFrame()).toContain('config not received yet');
  });
});
