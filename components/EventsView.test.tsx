import React from 'react';
import { describe, expect, it } from 'vitest';
import { render } from 'ink-testing-library';
import { storeFrom, withStore } from '../test/tui/console.js';
import { setUi } from '../src/tui/store.js';
import { eventTone, EventsView } from './EventsView.js';

describe('EventsView', () => {
  it('lists the newest first with the 1305xx code and the reason of a scheduling failure', () => {
    const { lastFrame } = render(withStore(storeFrom(), <EventsView height={11} width={100} />));
    const kinds = lastFrame()!
      .split('\n')
      .slice(1, 8)
      .map((l) => l.split(/ +/)[1]);
    expect(kinds).toEqual([
      'sandbox.destroyed',
      'config.reloaded',
      'schedule.failed',
      'sandbox.created',
      'sandbox.paused',
      'sandbox.created',
      'sandbox.created',
    ]);
    expect(lastFrame()).toMatch(/schedule\.failed +130597 +no node available: node-b: disk/);
    expect(lastFrame()).toMatch(/sandbox\.destroyed +node-a +sb-0002 +destroyed sb-0002 \(9ms\)/);
  });

  it('filters on any field, the code included', () => {
    const store = storeFrom();
    setUi(store, { filter: { events: '130597' } });
    const { lastFrame } = render(withStore(store, <EventsView height={9} width={100} />));
    const rows = lastFrame()!
      .split('\n')
      .filter((l) => /^\d\d:\d\d:\d\d /.test(l));
    expect(rows).toHaveLength(1);
    // The whole message of the selected failure under the table (a 130597 names every node and rule).
    expect(lastFrame()).toMatch(/schedule\.failed 130597: no node available: node-b: disk watermark 83% >=\n80%$/);
  });

  it('colours failures and warnings', () => {
    const ev = { id: 1, at: '', message: '' };
    expect(eventTone({ ...ev, kind: 'schedule.failed', code: 130597 })).toBe('bad');
    expect(eventTone({ ...ev, kind: 'sandbox.oom' })).toBe('bad');
    expect(eventTone({ ...ev, kind: 'node.draining' })).toBe('warn');
    expect(eventTone({ ...ev, kind: 'sandbox.created' })).toBeUndefined();
  });
});
