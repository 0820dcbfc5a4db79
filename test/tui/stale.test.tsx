// While the stream is STALE the tables are drawn faint (ANSI dim, mono included) and every
// tone is the dim one; outcome messages expire.
import React from 'react';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { colorOf, fadedSkin, pickSkin } from '../../src/tui/skins.js';
import { flash, FLASH_TTL_MS, setConn } from '../../src/tui/store.js';

// Ink's colours (chalk) are off without a terminal: on for this file, before Ink loads, so the
// dim attribute shows in the frames.
process.env.FORCE_COLOR = '1';
const { render } = await import('ink-testing-library');
const { SandboxesView } = await import('../../components/SandboxesView.js');
const { storeFrom, withStore } = await import('./console.js');

afterEach(() => {
  vi.useRealTimers();
});

describe('stale data', () => {
  it('fades every tone and draws the rows dim while STALE, and not once live again', () => {
    const dark = pickSkin('dark', {});
    expect(colorOf(fadedSkin(dark), 'bad')).toBe(dark.dim);
    expect(fadedSkin(dark)).toBe(fadedSkin(dark));
    const store = storeFrom();
    const { lastFrame, rerender } = render(withStore(store, <SandboxesView height={6} width={100} now={0} />));
    const DIM = '\x1b[2m';
    expect(lastFrame()).not.toContain(DIM);
    setConn(store, { state: 'stale', since: Date.now(), error: 'watch stream ended', attempt: 1 });
    rerender(withStore(store, <SandboxesView height={6} width={100} now={0} />));
    expect(
      lastFrame()!
        .split('\n')
        .filter((l) => l.includes('sb-00') && l.includes(DIM)).length,
    ).toBeGreaterThan(0);
    setConn(store, { state: 'live' });
    rerender(withStore(store, <SandboxesView height={6} width={100} now={0} />));
    expect(lastFrame()).not.toContain(DIM);
  });
});

describe('outcome messages', () => {
  it("expire after their level's time unless replaced", () => {
    vi.useFakeTimers();
    const store = storeFrom();
    flash(store, 'cordoned', 'ok');
    vi.advanceTimersByTime(FLASH_TTL_MS.ok - 1);
    expect(store.getState().ui.flash?.text).toBe('cordoned');
    vi.advanceTimersByTime(1);
    expect(store.getState().ui.flash).toBeNull();
    flash(store, 'drain failed', 'bad');
    vi.advanceTimersByTime(FLASH_TTL_MS.ok);
    expect(store.getState().ui.flash?.text).toBe('drain failed');
    flash(store, 'destroy failed', 'bad');
    // The timer of 'drain failed' fires and leaves the newer outcome alone.
    vi.advanceTimersByTime(FLASH_TTL_MS.bad - FLASH_TTL_MS.ok);
    expect(store.getState().ui.flash?.text).toBe('destroy failed');
    vi.advanceTimersByTime(FLASH_TTL_MS.ok);
    expect(store.getState().ui.flash).toBeNull();
  });
});
