// Per node: NIC pool levels, in-flight and on-demand allocations, wait percentiles, the TAP pool's levels and the warm pools.
import React from 'react';
import type { NodeView } from '../src/api/types.js';
import { millis, sparkline, warmLevel, warmPools } from '../src/tui/format.js';
import { NIC_WAIT_P99_MS } from '../src/tui/triage.js';
import { nodeRows } from '../src/tui/selectors.js';
import { sortLabel } from '../src/tui/sorting.js';
import { useViewState } from '../src/tui/react.js';
import { Table, type Column } from './Table.js';

export const POOL_COLUMNS: readonly Column<NodeView>[] = [
  { title: 'NODE', width: 'flex', min: 10, cell: (n) => n.nodeID },
  {
    title: 'FREE/TOTAL',
    width: 10,
    align: 'right',
    cell: (n) => `${n.pool.free}/${n.pool.total}`,
    tone: (n) => (n.pool.free === 0 && n.pool.total > 0 ? 'bad' : 'ok'),
  },
  { title: 'IN USE', width: 6, align: 'right', cell: (n) => String(n.pool.inUse) },
  { title: 'CREATING', width: 8, shed: 1, align: 'right', cell: (n) => String(n.pool.creating) },
  { title: 'TARGET', width: 6, shed: 2, align: 'right', cell: (n) => String(n.pool.target) },
  { title: 'IN-FLIGHT', width: 9, align: 'right', cell: (n) => String(n.pool.inFlight), tone: (n) => (n.pool.inFlight > 0 ? 'warn' : undefined) },
  { title: 'ON-DEMAND', width: 9, align: 'right', cell: (n) => String(n.pool.onDemand) },
  { title: 'P50', width: 6, align: 'right', cell: (n) => millis(n.pool.waitP50Ms) },
  { title: 'P99', width: 6, align: 'right', cell: (n) => millis(n.pool.waitP99Ms), tone: (n) => (n.pool.waitP99Ms >= NIC_WAIT_P99_MS ? 'bad' : undefined) },
  { title: 'RECENT WAITS', width: 16, shed: 3, cell: (n) => sparkline(n.pool.recentWaitsMs, 16) },
  // A node offering microvm keeps a second pool: slots made with a TAP for the microVMs. Kept at
  // 80 columns (CREATING and TARGET give way: the detail line says them).
  {
    title: 'TAP F/T',
    width: 9,
    align: 'right',
    cell: (n) => (n.tapPool ? `${n.tapPool.free}/${n.tapPool.total}` : '-'),
    tone: (n) => (n.tapPool && n.tapPool.free === 0 && n.tapPool.total > 0 ? 'bad' : undefined),
  },
  // Warm sandboxes ready of those wanted (cubelet warm pools): short of the target, creates of
  // those templates wait for their start command again.
  {
    title: 'WARM',
    width: 5,
    align: 'right',
    cell: warmLevel,
    tone: (n) => (Object.values(n.warm?.templates ?? {}).some((p) => p.ready < p.target) ? 'warn' : undefined),
  },
];

/** The selected node's pools whole: what the columns left out at 80 (creating, target) and the TAP pool's waits. */
export function poolDetail(n: NodeView): string {
  const line = (name: string, p: NodeView['pool']) =>
    `${name} ${p.free}/${p.total} free, ${p.inUse} in use, ${p.creating} creating, target ${p.target}, ${p.inFlight} waiting, ${p.onDemand} on demand, wait p50 ${millis(p.waitP50Ms)} p99 ${millis(p.waitP99Ms)}`;
  const warm = warmPools(n);
  return `${n.nodeID}: ${line('pool', n.pool)}${n.tapPool ? ` | ${line('microVM TAP pool', n.tapPool)}` : ''}${warm ? ` | ${warm}` : ''}`;
}

export function PoolView({ height, width }: { height: number; width: number }) {
  const { data, filter, sort, selected, skin } = useViewState('pool');
  return (
    <Table
      columns={POOL_COLUMNS}
      rows={nodeRows(data, filter, sort, 'pool')}
      rowKey={(n) => n.nodeID}
      selectedID={selected}
      height={height}
      width={width}
      skin={skin}
      detail={poolDetail}
      sort={sortLabel('pool', sort)}
      empty="no nodes"
    />
  );
}
