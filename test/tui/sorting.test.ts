import { describe, expect, it } from 'vitest';
import { nextSort, sortHelp, sortLabel, sortRows, SORTS } from '../../src/tui/sorting.js';
import { nodeRows, rowIDs, sandboxRows } from '../../src/tui/selectors.js';
import { nodeColumns } from '../../components/NodesView.js';
import { keyColumns, snapshotColumns, templateColumns } from '../../components/CatalogViews.js';
import { POOL_COLUMNS } from '../../components/PoolView.js';
import { sandboxColumns } from '../../components/SandboxesView.js';
import { EVENT_COLUMNS } from '../../components/EventsView.js';
import { TRIAGE_COLUMNS } from '../../components/TriageView.js';
import { storeFrom } from './console.js';

const data = storeFrom().getState().data;

describe('sorting', () => {
  it.each([
    [undefined, false, { by: 0, desc: false }],
    [{ by: 0, desc: false }, false, { by: 1, desc: false }],
    [{ by: 6, desc: true }, false, undefined],
    [undefined, true, { by: 0, desc: true }],
    [{ by: 3, desc: true }, true, { by: 3, desc: false }],
  ] as const)('nextSort(nodes, %j, reverse %s) = %j', (from, reverse, want) => {
    expect(nextSort('nodes', from, reverse)).toEqual(want);
  });

  it('sorts numbers as numbers, stably, and either way', () => {
    const rows = [
      { n: 10, id: 'a' },
      { n: 9, id: 'b' },
      { n: 10, id: 'c' },
    ];
    const cols = [{ title: 'N', key: (r: { n: number }) => r.n }];
    expect(sortRows(rows, cols, { by: 0, desc: false }).map((r) => r.id)).toEqual(['b', 'a', 'c']);
    expect(sortRows(rows, cols, { by: 0, desc: true }).map((r) => r.id)).toEqual(['a', 'c', 'b']);
    expect(sortRows(rows, cols, undefined)).toBe(rows);
  });

  it('the selectors (what keys move over) and the rows shown agree on the order', () => {
    const byMem = { by: SORTS.sandboxes.findIndex((c) => c.title === 'MEM'), desc: true };
    const shown = sandboxRows(data, undefined, byMem);
    expect(shown.map((x) => x.spec.memoryMiB)).toEqual([...shown.map((x) => x.spec.memoryMiB)].sort((a, b) => b - a));
    expect(rowIDs('sandboxes', data, undefined, byMem)).toEqual(shown.map((x) => x.sandboxID));
    const byHead = { by: SORTS.nodes.findIndex((c) => c.title === 'HEAD'), desc: false };
    expect(rowIDs('nodes', data, undefined, byHead)).toEqual(nodeRows(data, undefined, byHead).map((n) => n.nodeID));
    expect(sortLabel('nodes', byHead)).toEqual({ title: 'HEAD', arrow: '^' });
  });

  it("every sort column is a column of its view's table, and help lists them", () => {
    const titles = {
      nodes: nodeColumns(8).map((c) => c.title),
      sandboxes: sandboxColumns(0).map((c) => c.title),
      pool: POOL_COLUMNS.map((c) => c.title),
      events: EVENT_COLUMNS.map((c) => c.title),
      config: ['PATH', 'VALUE'],
      triage: TRIAGE_COLUMNS.map((c) => c.title),
      templates: templateColumns(new Map()).map((c) => c.title),
      snapshots: snapshotColumns(0).map((c) => c.title),
      keys: keyColumns.map((c) => c.title),
    };
    for (const [view, cols] of Object.entries(SORTS)) {
      for (const c of cols) expect(titles[view as keyof typeof titles], `${view} ${c.title}`).toContain(c.title);
    }
    expect(sortHelp()).toContain('sandboxes: SANDBOX TEMPLATE NODE STATE AGE CPU% MEM PROCS DISK NET RX/TX LEFT');
  });
});
