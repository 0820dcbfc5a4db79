import React from 'react';
import { describe, expect, it } from 'vitest';
import { render } from 'ink-testing-library';
import { storeFrom, withStore } from '../test/tui/console.js';
import { loadStream } from '../test/tui/replay.js';
import { nodeColumns, NodesView } from './NodesView.js';
import { columnWidths } from './Table.js';

// ink-testing-library's terminal is 100 columns wide: render at 100, read the cut-off
// columns through their cell functions.
const NODE_COLUMNS = nodeColumns(12);
const line = (frame: string, id: string) => frame.split('\n').find((l) => l.startsWith(id))!;

describe('NodesView', () => {
  it('shows health and schedulability apart, with the reason, and density against ceiling and safety boundary', () => {
    const store = storeFrom(loadStream('watch-handwritten.ndjson').slice(0, 1));
    const { lastFrame } = render(withStore(store, <NodesView height={6} width={100} />));
    expect(line(lastFrame()!, 'node-a')).toMatch(/^node-a +HEALTHY +yes +3 \/ 117 \(58 safe\) \.{6} memory +1\/0Mi +41%\/80%/);
    expect(line(lastFrame()!, 'node-b')).toMatch(/^node-b +HEALTHY +no: disk waterm +0 \/ 117 \(58 safe\)/);
    const b = store.getState().data.nodes['node-b']!;
    expect(NODE_COLUMNS.find((c) => c.title === 'SCHEDULABLE')!.cell(b)).toBe('no: disk watermark 83% >= 80%');
    for (const l of lastFrame()!.split('\n')) expect(l.length).toBeLessThanOrEqual(100);
  });

  it('at 80 columns leaves out the gauge, sparkline and bottleneck (paused/freed next), never disk or pool', () => {
    const store = storeFrom();
    const { lastFrame } = render(withStore(store, <NodesView height={6} width={80} />));
    const [header, ...rows] = lastFrame()!.split('\n');
    expect(header!.split(/ +/)).toEqual(['NODE', 'STATE', 'SCHEDULABLE', 'DENSITY', 'PAUS/FREE', 'DISK/MARK', 'POOL']);
    for (const l of [header!, ...rows]) expect(l.length).toBeLessThanOrEqual(80);
    expect(line(lastFrame()!, 'node-a')).toMatch(/3 \/ 117 \(58 safe\) +1\/3\.1Gi +\d+%\/80% +\d+\/\d+$/);
  });

  it('after the deltas: what the release ratio frees, the disk against its watermark, the empty pool', () => {
    const store = storeFrom();
    const { lastFrame } = render(withStore(store, <NodesView height={6} width={100} />));
    expect(line(lastFrame()!, 'node-a')).toMatch(/3 \/ 117 \(58 safe\) .* 1\/3\.1Gi/);
    expect(lastFrame()).toMatch(/node-b +HEALTHY +no: cordoned /);
    const a = store.getState().data.nodes['node-a']!;
    const b = store.getState().data.nodes['node-b']!;
    const cell = (title: string, n: typeof a) => NODE_COLUMNS.find((c) => c.title === title)!.cell(n);
    expect(cell('DISK/MARK', b)).toBe('83%/80%');
    expect(NODE_COLUMNS.find((c) => c.title === 'DISK/MARK')!.tone!(b)).toBe('bad');
    expect(cell('POOL', a)).toBe('0/32');
    expect(cell('WAITS', a)).toMatch(/^[_.:\-=+*#]{6}$/);
  });

  it('colours density green below the safety boundary, yellow between, red at the ceiling', () => {
    const a = storeFrom().getState().data.nodes['node-a']!;
    const tone = NODE_COLUMNS.find((c) => c.title === 'DENSITY')!.tone!;
    const at = (running: number) => tone({ ...a, sandboxes: { ...a.sandboxes, running, paused: 0 } });
    expect([at(57), at(58), at(116), at(117)]).toEqual(['ok', 'warn', 'warn', 'bad']);
  });

  it('fits 120 columns with the whole disk-watermark reason', () => {
    const w = columnWidths(NODE_COLUMNS, 120);
    expect(w.reduce((a, b) => a + b + 1, -1)).toBe(120);
    expect(w[2]).toBeGreaterThanOrEqual('no: disk watermark 83% >= 80%'.length);
  });

  it('sizes the NODE column to the longest id, up to a cap', () => {
    expect(nodeColumns(19)[0]!.width).toBe(19);
    expect(nodeColumns(60)[0]!.width).toBe(24);
  });

  it('filters rows', () => {
    const store = storeFrom();
    store.setState((s) => ({ ui: { ...s.ui, filter: { nodes: 'node-b' } } }));
    const { lastFrame } = render(withStore(store, <NodesView height={6} width={100} />));
    expect(lastFrame()).toContain('node-b');
    expect(lastFrame()).not.toContain('node-a');
  });
});
