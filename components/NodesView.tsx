// One row a node: health and schedulability (the scheduler's verdict and reason), host CPU use
// and MemAvailable, density against the ceiling and the safety boundary, headroom, what pausing
// frees, disk against the watermark, the NIC pool.
import React, { useContext, useMemo } from 'react';
import type { NodeView } from '../src/api/types.js';
import { densityLevel, densityText, diskQuota, gauge, mib, percent, ratio, sparkline, type Level } from '../src/tui/format.js';
import { nodeRows } from '../src/tui/selectors.js';
import { sortLabel } from '../src/tui/sorting.js';
import { useViewState } from '../src/tui/react.js';
import type { Tone } from '../src/tui/skins.js';
import { Table, TableMode, type Column } from './Table.js';

const live = (n: NodeView) => n.sandboxes.running + n.sandboxes.paused;
/**
 * The fill the daemon measures, not the count: sandboxes smaller than the default spec made
 * `7 / 6` red on a node with room (issue 16). Full when the daemon's headroom is 0; warn past
 * the safe share of the quota (the safety boundary's share of the paper ceiling).
 */
const level = (n: NodeView): Level => {
  const d = n.density;
  if (d.memQuotaMiB === undefined) return densityLevel(live(n), d.safetyBoundary, d.effectiveCeiling);
  if (d.headroom <= 0) return 'bad';
  return d.paperCeiling > 0 && n.usage.quotaMemUsedMiB >= (d.memQuotaMiB * d.safetyBoundary) / d.paperCeiling ? 'warn' : 'ok';
};

/** Footprint in use of the memory quota, e.g. `12.3/479.0Gi`; count alone says nothing when specs differ. */
export function footprint(n: NodeView): string {
  const q = n.density.memQuotaMiB;
  return q === undefined ? mib(n.usage.quotaMemUsedMiB) : `${mib(n.usage.quotaMemUsedMiB)}/${mib(q)}`;
}

/**
 * What the footprint's denominator is: the memory quota, the declared or host memory less the
 * reserve times the oversell factor. `0Mi/105.9Gi` on a 23.5 GiB host read as a host figure
 * (issue 16); `quota 105.9Gi = 4.5x host 23.5Gi` says it is not.
 */
export function quotaBasis(n: NodeView): string {
  const q = n.density.memQuotaMiB;
  if (q === undefined) return '';
  const base = n.capacity.memoryMiB;
  return ` of quota ${mib(q)} = ${base > 0 ? (q / base).toFixed(1) : '-'}x ${n.capacity.declared ? 'declared' : 'host'} ${mib(base)}`;
}

/** Health first; a healthy node being drained says so (it read HEALTHY while draining). */
export function nodeState(n: NodeView): string {
  return n.lost ? 'LOST' : !n.healthy ? 'UNHEALTHY' : n.draining ? 'DRAINING' : 'HEALTHY';
}

export function schedulable(n: NodeView): string {
  return n.schedulable ? 'yes' : `no: ${n.reason || 'unknown'}`;
}

/**
 * The selected node's line of its own: the scheduler's full verdict (with the rule that gave it),
 * the footprint in use against the quota, the headroom and all-paused ceiling at the ratio in
 * force (the daemon's density, never recomputed here), then the host numbers the filters read.
 */
export function nodeDetail(n: NodeView): string {
  const verdict = n.schedulable ? 'schedulable' : `NOT schedulable (${n.refusedBy ?? 'rule'}): ${n.reason || 'unknown'}`;
  const total = n.usage.memTotalMiB;
  const d = n.density;
  // Density before the host figures: at 80 columns the table already shows CPU, MEMAV and DISK/MARK.
  return `${n.nodeID} ${verdict} | footprint ${mib(n.usage.quotaMemUsedMiB)}${quotaBasis(n)}, headroom ${d.headroom}, all paused ${d.allPausedCeiling} at r ${ratio(d.releaseRatio)} | host cpu ${percent(n.usage.cpuUtilPercent)}, MemAvailable ${mib(n.usage.memAvailableMiB)}${total ? ` of ${mib(total)}` : ''}, disk ${percent(n.usage.diskUsedPercent)}/${n.usage.diskWatermarkPercent}%${d.diskQuotaGiB !== undefined ? `, quota ${diskQuota(n)}` : ''}${n.tapPool ? ` | microVM TAP pool ${n.tapPool.free}/${n.tapPool.total} free` : ''}`;
}

const GAUGE = 6;

const density = (n: NodeView): string => densityText(live(n), n.density.effectiveCeiling, n.density.safetyBoundary);
/** DENSITY's width when every row's text is shorter: `86 / 117 (58 safe)`; wider texts widen it (`100 / 469 (234 safe)` was cut). */
const DENSITY_MIN = 18;

/** The widest DENSITY text of the rows, at least DENSITY_MIN (pure). */
export function densityWidth(nodes: Iterable<NodeView>): number {
  let w = DENSITY_MIN;
  for (const n of nodes) w = Math.max(w, density(n).length);
  return w;
}

/**
 * The node's verdict, its footprint against the quota (and what the quota is), then the host
 * figures: about 200 characters with a cpu refusal, which two lines at 80 columns cut before
 * the host CPU (tmux, issue 16). One table row fewer is the price.
 */
export const NODE_DETAIL_LINES = 3;

/** The NODE column fits the longest id up to this; longer ids are cut. */
export const NODE_ID_MAX = 24;

// Only problems are coloured (and the density gauge): fewer colour spans is cheaper for Ink
// to draw, and the eye goes to what is wrong.
// At 140 columns with ids up to 12 characters every column fits, and the selected node's full
// verdict has a line of its own under the table (nodeDetail); narrower terminals cut the
// reason first, then leave out the columns that repeat or decorate others (the wait sparkline,
// the load gauge beside DENSITY, the bottleneck, paused/freed, then the all-paused ceiling and
// the footprint, which the detail line also says), then cut long node ids: at 80 columns CPU,
// MEMAVAIL, DENSITY, HEAD, DISK/MARK and POOL stay whole.
const COLUMNS: Column<NodeView>[] = [
  { title: 'STATE', width: 9, cell: nodeState, tone: (n): Tone | undefined => (n.healthy && !n.lost ? (n.draining ? 'warn' : undefined) : 'bad') },
  { title: 'SCHEDULABLE', width: 'flex', min: 6, cell: schedulable, tone: (n) => (n.schedulable ? undefined : 'warn') },
  { title: 'CPU', width: 4, align: 'right', cell: (n) => percent(n.usage.cpuUtilPercent) },
  { title: 'MEMAV', width: 7, align: 'right', cell: (n) => mib(n.usage.memAvailableMiB) },
  { title: 'DENSITY', width: DENSITY_MIN, align: 'right', cell: density, tone: level },
  { title: 'HEAD', width: 4, align: 'right', cell: (n) => String(n.density.headroom), tone: (n) => (n.density.headroom <= 0 ? 'bad' : undefined) },
  { title: 'FOOT/QUOTA', width: 15, shed: 0, align: 'right', cell: footprint, tone: level },
  { title: 'ALLP', width: 4, shed: 0.5, align: 'right', cell: (n) => String(n.density.allPausedCeiling) },
  { title: 'LOAD', width: GAUGE, shed: 3, cell: (n) => gauge(live(n), n.density.effectiveCeiling, GAUGE), tone: level },
  { title: 'BOUND', width: 6, shed: 2, cell: (n) => n.density.bottleneck },
  { title: 'PAUS/FREE', width: 9, shed: 1, align: 'right', cell: (n) => `${n.sandboxes.paused}/${mib(n.density.releasedMiB)}` },
  {
    title: 'DISK/MARK',
    width: 9,
    align: 'right',
    cell: (n) => `${Math.round(n.usage.diskUsedPercent)}%/${n.usage.diskWatermarkPercent}%`,
    tone: (n) => (n.usage.diskUsedPercent >= n.usage.diskWatermarkPercent ? 'bad' : undefined),
  },
  {
    title: 'POOL',
    width: 7,
    align: 'right',
    cell: (n) => `${n.pool.free}/${n.pool.total}`,
    tone: (n) => (n.pool.free === 0 && n.pool.total > 0 ? 'bad' : undefined),
  },
  { title: 'WAITS', width: 6, shed: 4, cell: (n) => sparkline(n.pool.recentWaitsMs, 6) },
];

/** What the columns that are never left out take (with one separator each), NODE aside. */
const KEPT_WIDTH = COLUMNS.filter((c) => c.shed === undefined).reduce((w, c) => w + 1 + (c.width === 'flex' ? (c.min ?? 8) : c.width), 0);

/**
 * NODE first, as wide as the longest id up to NODE_ID_MAX, and cut further when the kept columns
 * would not fit `width`; DENSITY as wide as its widest text (node ids give way to it).
 */
export const nodeColumns = (idWidth: number, width = 120, densityW = DENSITY_MIN): Column<NodeView>[] => [
  { title: 'NODE', width: Math.max(4, Math.min(NODE_ID_MAX, idWidth, width - KEPT_WIDTH - (densityW - DENSITY_MIN))), cell: (n) => n.nodeID },
  ...COLUMNS.map((c) => (c.title === 'DENSITY' && densityW !== DENSITY_MIN ? { ...c, width: densityW } : c)),
];

export function NodesView({ height, width }: { height: number; width: number }) {
  const { data, filter, sort, selected, skin } = useViewState('nodes');
  const idWidth = data.nodeOrder.reduce((w, id) => Math.max(w, id.length), 0);
  const densityW = useMemo(() => densityWidth(Object.values(data.nodes)), [data.nodes]);
  // Wide mode: node ids whole (up to NODE_ID_MAX), the line cut at the right edge instead.
  const { wide } = useContext(TableMode);
  const columns = useMemo(() => nodeColumns(idWidth, wide ? Infinity : width, densityW), [idWidth, width, densityW, wide]);
  return (
    <Table
      columns={columns}
      rows={nodeRows(data, filter, sort)}
      rowKey={(n) => n.nodeID}
      selectedID={selected}
      height={height}
      width={width}
      skin={skin}
      detail={nodeDetail}
      detailLines={NODE_DETAIL_LINES}
      sort={sortLabel('nodes', sort)}
      empty="no nodes (is the daemon up?)"
    />
  );
}
