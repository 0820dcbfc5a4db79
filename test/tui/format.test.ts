import { describe, expect, it } from 'vitest';
import type { NodeView, SandboxView } from '../../src/api/types.js';
import {
  age,
  cut,
  densityLevel,
  densityText,
  diskQuota,
  diskUse,
  fit,
  gauge,
  inline,
  mib,
  millis,
  shortDuration,
  sparkline,
  storeFree,
  timeLeft,
  wrap,
} from '../../src/tui/format.js';

const NOW = Date.parse('2026-11-30T06:00:00.000Z');

describe('format', () => {
  it.each([
    ['abc', 5, 'left', 'abc  '],
    ['abc', 5, 'right', '  abc'],
    ['abcdef', 3, 'left', 'abc'],
    ['abc', 0, 'left', ''],
  ] as const)('fit(%j, %d, %s)', (s, w, a, want) => expect(fit(s, w, a)).toBe(want));

  it('cut only shortens', () => {
    expect(cut('abcdef', 4)).toBe('abcd');
    expect(cut('ab', 4)).toBe('ab');
  });

  it.each([
    [0, '0s'],
    [59_999, '59s'],
    [60_000, '1m'],
    [3_600_000, '1h'],
    [90_000_000, '1d'],
    [-5, '0s'],
  ])('shortDuration(%d) = %s', (ms, want) => expect(shortDuration(ms)).toBe(want));

  it.each([
    ['2026-11-30T06:00:30.000Z', '30s'],
    ['2026-11-30T06:04:05.000Z', '4m05s'],
    ['2026-11-30T08:00:00.000Z', '2h'],
    ['2026-11-30T05:59:00.000Z', 'expired'],
    ['not a date', '-'],
  ])('timeLeft(%s) = %s', (end, want) => expect(timeLeft(end, NOW)).toBe(want));

  it('age counts from startedAt', () => expect(age('2026-11-30T05:55:00.000Z', NOW)).toBe('5m'));

  it.each([
    [512, '512Mi'],
    [4202, '4.1Gi'],
    [257024, '251.0Gi'],
    [2 * 1024 * 1024, '2.0Ti'],
  ])('mib(%d) = %s', (n, want) => expect(mib(n)).toBe(want));

  it.each([
    [98.4, '98ms'],
    [1500, '1.5s'],
  ])('millis(%d) = %s', (n, want) => expect(millis(n)).toBe(want));

  it.each([
    [57, 58, 117, 'ok'],
    [58, 58, 117, 'warn'],
    [116, 58, 117, 'warn'],
    [117, 58, 117, 'bad'],
    [152, 864, 153, 'ok'],
  ] as const)('densityLevel(%d, safe %d, ceiling %d) = %s', (live, safe, ceil, want) => expect(densityLevel(live, safe, ceil)).toBe(want));

  it('densityText reads like the design', () => expect(densityText(86, 117, 58)).toBe('86 / 117 (58 safe)'));
  it('densityText never shows a safety boundary above the ceiling (CPU-bound node)', () => expect(densityText(1, 153, 864)).toBe('1 / 153 (153 safe)'));

  it.each([
    [0, 10, 4, '....'],
    [5, 10, 4, '##..'],
    [20, 10, 4, '####'],
    [1, 0, 3, '###'],
  ])('gauge(%d of %d, width %d)', (v, max, w, want) => expect(gauge(v, max, w)).toBe(want));

  it('sparkline scales to the max and pads to width', () => {
    expect(sparkline([0, 4, 8], 4)).toBe('_-# ');
    expect(sparkline([0, 0], 2)).toBe('__');
    expect(sparkline([1, 2, 3, 8], 2)).toBe(':#');
  });

  it('inline shows values on one line', () => {
    expect(inline(0.75)).toBe('0.75');
    expect(inline(['a', 'b'])).toBe('["a","b"]');
    expect(inline(undefined)).toBe('-');
  });

  it('shows the store free of its size and a sandbox disk use of its limit', () => {
    const usage = {
      store: { kind: 'loop', path: '/d/store', sizeBytes: 40 * 2 ** 30, freeBytes: 12.3 * 2 ** 30, usedPercent: 69 },
    } as unknown as NodeView['usage'];
    expect(storeFree({ usage } as NodeView)).toBe('12.3Gi/40.0Gi');
    expect(storeFree({ usage: {} } as NodeView)).toBe('-');
    const spec = { cpus: 1, memoryMiB: 256, diskGiB: 10 };
    expect(diskUse({ spec, diskUsedBytes: 300 * 2 ** 20 } as SandboxView)).toBe('300Mi/10Gi');
    expect(diskUse({ spec } as SandboxView)).toBe('-/10Gi');
  });

  it('shows the disk quota held of what the store may promise', () => {
    expect(diskQuota({ usage: { quotaDiskUsedGiB: 1.5 }, density: { diskQuotaGiB: 240 } } as NodeView)).toBe('1.5/240Gi');
    expect(diskQuota({ usage: { quotaDiskUsedGiB: 0 }, density: {} } as NodeView)).toBe('-');
    expect(diskQuota({ usage: {}, density: { diskQuotaGiB: 240 } } as NodeView)).toBe('-');
  });
});

describe('wrap', () => {
  it.each([
    ['no node available: n1: cpu util 94.8% >= 80%', 20, 9, ['no node available:', 'n1: cpu util 94.8%', '>= 80%']],
    ['short', 20, 9, ['short']],
    ['', 20, 9, ['']],
    ['abcdefghij klm', 4, 9, ['abcd', 'efgh', 'ij', 'klm']],
    ['one two three four five', 9, 2, ['one two', 'three...']],
  ] as const)('%j at %i columns, %i lines', (text, width, lines, want) => {
    const got = wrap(text, width, lines);
    expect(got).toEqual(want);
    for (const l of got) expect(l.length).toBeLessThanOrEqual(width);
  });
});
