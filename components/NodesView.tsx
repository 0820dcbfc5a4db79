// One row a node: health and schedulability (with the reason), density against the ceiling
// and the safety boundary, what pausing frees, disk against the watermark, the NIC pool.
import React, { useMemo } from 'react';
import type { NodeView } from '../src/api/types.js';
import { densityLevel, densityText, gauge, mib, sparkline } from '../src/tui/format.js';
import { nodeRows } from '../src/tui/selectors.js';
import { useViewState } from '../src/tui/react.js';
import type { Tone } from '../src/tui/skins.js';
import { Table, type Column } from './Table.js';

const live = (n: NodeView) => n.sandboxes.running + n.sandboxes.paused;
const level = (n: NodeView) => densityLevel(live(n), n.density.safetyBoundary, n.density.effectiveCeiling);

export function nodeState(n: NodeView): string {
  return n.lost ? 'LOST' : n.healthy ? 'HEALTHY' : 'UNHEALTHY';
}

export function schedulable(n: NodeView): string {
  return n.schedulable ? 'yes' : `no: ${n.reason || 'unknown'}`;
}

const GAUGE = 6;

/** The NODE column fits the longest id up to this; longer ids are cut. */
export const NODE_ID_MAX = 24;

// Only problems are coloured (and the density gauge): fewer colour spans is cheaper for Ink
// to draw, and the eye goes to what is wrong.
// At 120 columns with ids up to 12 characters every column fits whole, the schedulability
// reason included (`no: disk watermark 83% >= 80%`); narrower terminals cut the reason first,
// then leave out the columns that repeat or decorate others (the wait sparkline, the load gauge
// beside DENSITY, the bottleneck, paused/freed): at 80 columns the disk and pool columns stay.
export const nodeColumns = (idWidth: number): Column<NodeView>[] => [
  { title: 'NODE', width: Math.min(NODE_ID_MAX, Math.max(4, idWidth)), cell: (n) => n.nodeID },
  { title: 'STATE', width: 9, cell: nodeState, tone: (n): Tone | undefined => (n.healthy && !n.lost ? undefined : 'bad') },
  { title: 'SCHEDULABLE', width: 'flex', min: 10, cell: schedulable, tone: (n) => (n.schedulable ? undefined : 'warn') },
  { title: 'DENSITY', width: 18, align: 'right', cell: (n) => densityText(live(n), n.density.effectiveCeiling, n.density.safetyBoundary), tone: level },
  { title: 'LOAD', width: GAUGE, shed: 3, cell: (n) => gauge(live(n), n.density.effectiveCeiling, GAUGE), tone: level },
  { title: 'BOUND', width: 6, shed: 2, cell: (n) => n.density.bottleneck },
  { title: 'PAUS/FREE', width: 9, shed: 1, align: 'right', cell: (n) => `${n.sandboxes.paused}/${mib(n.density.releasedMiB)}` },
  { title: 'DISK/MARK', width: 9, align: 'right', cell: (n) => `${Math.round(n.usage.diskUsedPercent)}%/${n.usage.diskWatermarkPercent}%`, tone: (n) => (n.usage.diskUsedPercent >= n.usage.diskWatermarkPercent ? 'bad' : undefined) },
  { title: 'POOL', width: 7, align: 'right', cell: (n) => `${n.pool.free}/${n.pool.total}`, tone: (n) => (n.pool.free === 0 && n.pool.total > 0 ? 'bad' : undefined) },
  { title: 'WAITS', width: 6, shed: 4, cell: (n) => sparkline(n.pool.recentWaitsMs, 6) },
];

export function NodesView({ height, width }: { height: number; width: number }) {
  const { data, filter, selected, skin } = useViewState('nodes');
  const idWidth = data.nodeOrder.reduce((w, id) => Math.max(w, id.length), 0);
  const columns = useMemo(() => nodeColumns(idWidth), [idWidth]);
  return <Table columns={columns} rows={nodeRows(data, filter)} rowKey={(n) => n.nodeID} selectedID={selected} height={height} width={width} skin={skin} empty="no nodes (is the daemon up?)" />;
}
