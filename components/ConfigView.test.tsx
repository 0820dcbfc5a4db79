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
    expect(lines.slice(2, 5)).toEqual([
      expect.stringMatching(/^master\.host\.quota\.mem_oversell_ratio +live +2$/),
      expect.stringMatching(/^master\.host\.quota\.cpu_oversell_ratio +live +3$/),
      expect.stringMatching(/^master\.host\.quota\.paused_resource_release_ratio +live +0\.75$/),
    ]);
  });

  it('marks the keys whose new value waits for a restart (the schema says which)', () => {
    const store = storeFrom();
    const config = store.getState().data.config!;
    store.setState((s) => ({
      data: {
        ...s.data,
        config: { ...config, master: { api: { listen: '127.0.0.1:3000' } }, cubelet: { plugins: { 'io.cubelet.internal.v1.network': { tap_init_num: 32 } } } },
      },
    }));
    const { lastFrame } = render(withStore(store, <ConfigView height={10} width={80} />));
    expect(lastFrame()).toMatch(/^master\.api\.listen +restart +127\.0\.0\.1:3000$/m);
    expect(lastFrame()).toMatch(/^~\S*internal\.v1\.network\.tap_init_num +restart +32$/m);
    for (const l of lastFrame()!.split('\n')) expect(l.length).toBeLessThanOrEqual(80);
  });

  it('shows the values in force where daemon flags override the files, and where each value came from', () => {
    const store = storeFrom();
    const config = store.getState().data.config!;
    store.setState((s) => ({
      data: {
        ...s.data,
        config: {
          ...config,
          master: { api: { listen: '127.0.0.1:3000', max_sandboxes_per_key: 50 } },
          cubelet: { node_id: '', data_dir: '/var/lib/cubed' },
          inFile: ['master.api.max_sandboxes_per_key'],
          overrides: [
            { path: 'master.api.listen', value: '127.0.0.1:4123', from: '--listen' },
            { path: 'cubelet.data_dir', value: '/srv/cubed', from: '--data-dir' },
            { path: 'cubelet.node_id', value: 'web-7', from: 'host name' },
          ],
        },
      },
      ui: { ...s.ui, selected: { config: 'master.api.listen' } },
    }));
    const { lastFrame } = render(withStore(store, <ConfigView height={12} width={80} />));
    const frame = lastFrame()!;
    expect(frame).toMatch(/^master\.api\.listen +restart +--listen +127\.0\.0\.1:4123$/m);
    expect(frame).toMatch(/^master\.api\.max_sandboxes_per_key +\S+ +file +50$/m);
    expect(frame).toMatch(/^cubelet\.data_dir +restart +--data-dir +\/srv\/cubed$/m);
    expect(frame).toMatch(/^cubelet\.node_id +restart +host name +web-7$/m);
    expect(frame).not.toContain('127.0.0.1:3000 ');
    // The selected key's line of its own names what the flag overrides.
    expect(frame.split('\n').slice(-2).join(' ').trimEnd()).toBe(
      'master.api.listen = 127.0.0.1:4123 (from --listen), over the default 127.0.0.1:3000; a new value waits for a restart',
    );
    for (const l of frame.split('\n')) expect(l.length).toBeLessThanOrEqual(80);
  });

  it('says so before the config arrives', () => {
    const { lastFrame } = render(withStore(storeFrom([]), <ConfigView height={5} width={100} />));
    expect(lastFrame()).toContain('config not received yet');
  });
});
