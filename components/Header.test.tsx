import React from 'react';
import { describe, expect, it } from 'vitest';
import { render } from 'ink-testing-library';
import { storeFrom, withStore } from '../test/tui/console.js';
import { connectionText, Header, headerHeight } from './Header.js';

describe('Header', () => {
  it.each([
    [{ state: 'live', since: 0, error: '', attempt: 0 }, 'LIVE'],
    [{ state: 'connecting', since: 0, error: '', attempt: 0 }, 'CONNECTING'],
    [{ state: 'connecting', since: 0, error: 'ECONNREFUSED', attempt: 2 }, 'CONNECTING (retry 2: ECONNREFUSED)'],
    [{ state: 'stale', since: 1_000, error: 'watch stream ended', attempt: 3 }, 'STALE 12s (retry 3: watch stream ended)'],
  ] as const)('connectionText(%j)', (c, want) => expect(connectionText(c, 13_000)).toBe(want));

  it('says a rejected config on disk on a line of its own until it is fixed', () => {
    const store = storeFrom();
    const config = store.getState().data.config!;
    store.setState((s) => ({ data: { ...s.data, config: { ...config, rejected: { at: '2026-11-30T05:40:01.000Z', errors: [{ path: 'host.quota.mem_oversell_ratio', message: 'Too small' }] } } } }));
    const { lastFrame, rerender } = render(withStore(store, <Header width={100} />));
    expect(lastFrame()!.split('\n')[2]).toBe('CONFIG ON DISK REJECTED (v2 stays, since 05:40:01): host.quota.mem_oversell_ratio: Too small');
    expect(headerHeight(store.getState().data.config)).toBe(3);
    store.setState((s) => ({ data: { ...s.data, config } }));
    rerender(withStore(store, <Header width={100} />));
    expect(lastFrame()!.split('\n')).toHaveLength(2);
  });

  it('shows totals, rate, p99, ratio, config version and the read-only badge', () => {
    const store = storeFrom(undefined, { readonly: true });
    const { lastFrame } = render(withStore(store, <Header width={100} />));
    expect(lastFrame()).toBe(
      'LIVE  http://127.0.0.1:3000 [RO]  config v2  release ratio 0.75\nnodes 2 (1 schedulable)  sandboxes 2 running 1 paused  creates 15/min 0.23/s p99 101ms',
    );
  });

  it('marks the data stale with the reason while the stream is down', () => {
    const store = storeFrom();
    store.setState((s) => ({ conn: { state: 'stale', since: Date.now(), error: 'ECONNREFUSED', attempt: 4 } }));
    const { lastFrame } = render(withStore(store, <Header width={100} />));
    expect(lastFrame()!.split('\n')[0]).toMatch(/^STALE 0s \(retry 4: ECONNREFUSED\)  http:/);
  });

  it('shows dashes before the first snapshot', () => {
    const store = storeFrom([]);
    const { lastFrame } = render(withStore(store, <Header width={100} />));
    expect(lastFrame()).toContain('config v-  release ratio -');
    expect(lastFrame()).toContain('nodes 0 (0 schedulable)  sandboxes 0 running 0 paused  creates -');
  });
});
