import React from 'react';
import { describe, expect, it } from 'vitest';
import { render } from 'ink-testing-library';
import { storeFrom, withStore } from '../test/tui/console.js';
import { POOL_COLUMNS, PoolView } from './PoolView.js';

describe('PoolView', () => {
  it('shows per node the pool levels, in-flight and on-demand allocations and the wait percentiles', () => {
    const store = storeFrom();
    const { lastFrame } = render(withStore(store, <PoolView height={5} width={116} />));
    expect(lastFrame()).toMatch(/node-a +0\/32 +32 +0 +32 +4 +7 +1ms +230ms [_.:\-=+*#]+/);
    expect(lastFrame()).toMatch(/node-b +30\/32 +2 +0 +32 +0 +0 +1ms +3ms/);
    const a = store.getState().data.nodes['node-a']!;
    expect(POOL_COLUMNS.find((c) => c.title === 'P99')!.tone!(a)).toBe('bad');
    expect(POOL_COLUMNS.find((c) => c.title === 'FREE/TOTAL')!.tone!(a)).toBe('bad');
  });
});
