import { describe, expect, it } from 'vitest';
import { colorOf, isSkinName, pickSkin } from '../../src/tui/skins.js';
import { backoffDelay } from '../../src/tui/watch.js';

describe('skins', () => {
  it('NO_COLOR (any non-empty value) forces mono whatever the skin', () => {
    expect(pickSkin('dark', { NO_COLOR: '1' }).name).toBe('mono');
    expect(pickSkin('16', { NO_COLOR: '' }).name).toBe('16');
    expect(colorOf(pickSkin('dark', { NO_COLOR: 'yes' }), 'bad')).toBeUndefined();
    expect(colorOf(pickSkin('16', {}), 'bad')).toBe('red');
    expect(colorOf(pickSkin('16', {}), undefined)).toBeUndefined();
  });

  it('knows its names', () => {
    expect(['dark', 'light', '16', 'mono', 'pink'].map(isSkinName)).toEqual([true, true, true, true, false]);
  });
});

describe('watch reconnect backoff', () => {
  it.each([
    [1, 500],
    [2, 1000],
    [4, 4000],
    [5, 8000],
    [6, 10_000],
    [50, 10_000],
  ])('attempt %d waits %d ms', (attempt, want) => expect(backoffDelay(attempt, 500, 10_000)).toBe(want));
});
