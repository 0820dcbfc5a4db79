import React from 'react';
import { describe, expect, it } from 'vitest';
import { render } from 'ink-testing-library';
import { pickSkin } from '../src/tui/skins.js';
import { columnWidths, fitColumns, Table, windowStart, type Column } from './Table.js';

interface R {
  id: string;
  n: number;
}
const COLS: Column<R>[] = [
  { title: 'ID', width: 'flex', min: 4, cell: (r) => r.id },
  { title: 'N', width: 5, align: 'right', cell: (r) => String(r.n) },
];
const rows = Array.from({ length: 1000 }, (_, i) => ({ id: `row-${String(i).padStart(4, '0')}`, n: i }));
const mono = pickSkin('mono');

describe('Table', () => {
  it.each([
    [10, 0, 20, 0],
    [1000, 0, 20, 0],
    [1000, 500, 20, 490],
    [1000, 999, 20, 980],
  ])('windowStart(count %d, selected %d, height %d) = %d', (count, sel, h, want) => expect(windowStart(count, sel, h)).toBe(want));

  it('the flex column takes what the fixed ones leave', () => {
    expect(columnWidths(COLS, 40)).toEqual([34, 5]);
    expect(columnWidths(COLS, 5)).toEqual([4, 5]);
  });

  it.each([
    [40, ['ID', 'A', 'B', 'C']],
    [24, ['ID', 'A', 'C']], // B (shed 2) goes first
    [17, ['ID', 'C']], // then A (shed 1); C and the flex ID have no rank and stay
    [5, ['ID', 'C']],
  ])('fitColumns at width %d keeps %j', (width, titles) => {
    const cols: Column<R>[] = [
      { title: 'ID', width: 'flex', min: 4, cell: (r) => r.id },
      { title: 'A', width: 6, shed: 1, cell: () => 'a' },
      { title: 'B', width: 6, shed: 2, cell: () => 'b' },
      { title: 'C', width: 6, cell: () => 'c' },
    ];
    expect(fitColumns(cols, width).map((c) => c.title)).toEqual(titles);
  });

  it('renders only the window around the selection, with its position', () => {
    const { lastFrame } = render(<Table columns={COLS} rows={rows} rowKey={(r) => r.id} selectedID="row-0500" height={11} width={40} skin={mono} />);
    const lines = lastFrame()!.split('\n');
    expect(lines).toHaveLength(11);
    expect(lines[0]).toMatch(/^ID .* 496-505 of 1000$/);
    expect(lines[1]).toMatch(/^row-0495 +495$/);
    expect(lines[10]).toMatch(/^row-0504 +504$/);
    expect(lastFrame()).not.toContain('row-0494');
  });

  it('cuts every line to the width', () => {
    const wide: Column<R>[] = [...COLS, { title: 'LONG', width: 60, cell: () => 'x'.repeat(60) }];
    const { lastFrame } = render(<Table columns={wide} rows={rows.slice(0, 3)} rowKey={(r) => r.id} height={5} width={30} skin={mono} />);
    for (const l of lastFrame()!.split('\n')) expect(l.length).toBeLessThanOrEqual(30);
  });

  it('says when there is nothing to show', () => {
    const { lastFrame } = render(<Table columns={COLS} rows={[]} rowKey={(r) => r.id} height={5} width={30} skin={mono} empty="no rows here" />);
    expect(lastFrame()).toContain('no rows here');
  });
});
