import React from 'react';
import { describe, expect, it } from 'vitest';
import { render } from 'ink-testing-library';
import { storeFrom, withStore } from '../test/tui/console.js';
import { connectionText, Header, headerHeight, headerTotals } from './Header.js';

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
    store.setState((s) => ({
      data: {
        ...s.data,
        config: { ...config, rejected: { at: '2026-11-30T05:40:01.000Z', errors: [{ path: 'host.quota.mem_oversell_ratio', message: 'Too small' }] } },
      },
    }));
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

  it('keeps the create p99 and the config version and ratio whole at 80 columns', () => {
    const store = storeFrom();
    const { lastFrame } = render(withStore(store, <Header width={80} />));
    const [l1, l2] = lastFrame()!.split('\n');
    expect(l1).toBe('LIVE  http://127.0.0.1:3000  config v2  release ratio 0.75');
    expect(l2).toBe('nodes 2 (1 schedulable)  sandboxes 2 run 1 paused  creates 15/min p99 101ms');
    // A reconnect's reason takes the room: the version and ratio come before the URL.
    store.setState(() => ({ conn: { state: 'stale', since: Date.now(), error: 'connect ECONNREFUSED', attempt: 4 } }));
    expect(
      render(withStore(store, <Header width={80} />))
        .lastFrame()!
        .split('\n')[0],
    ).toBe('STALE 0s (retry 4: connect ECONNREFUSED)  config v2  release ratio 0.75  http://');
  });

  it('puts the p99 first when even the short words do not fit', () => {
    const big = { nodes: 1000, schedulable: 998, running: 25000, paused: 12000, creating: 0 };
    const stats = { createsLastMinute: 12000, createRatePerSec: 200, createP99Ms: 1234 } as Parameters<typeof headerTotals>[1];
    const forms = headerTotals(big, stats);
    expect(forms[forms.length - 1]).toBe('creates 12000/min p99 1.2s  nodes 1000 (998 sched)  25000 run 12000 paused');
    expect(forms[forms.length - 1]!.length).toBeLessThanOrEqual(80);
  });
});
