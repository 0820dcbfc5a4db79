// Sort keys of every table: `s` moves the sort to the next column of this list, `S` reverses it.
// One list per view, named by the column titles the tables show (the header marks the sorted
// one), read by the selectors (so keys and rows agree), the keymap's help and docs/console.md.
// Pure.
import type { EventView, KeyView, NodeView, SandboxView, SnapshotView } from '../api/types.js';
import type { SandboxRow, TemplateRow } from './model.js';
import type { Finding } from './triage.js';
import type { ViewName } from './views.js';

export interface ConfigRow {
  path: string;
  /** The value in force: a daemon flag's where one overrides the files. */
  value: string;
  /** A new value waits for a daemon restart (the schema's `restart` mark, as `config set` reports it). */
  restart: boolean;
  /** Where the value in force came from: `file`, `default`, a flag such as `--listen`, or what the daemon found (`listening`, `host name`); '' when the daemon does not say. */
  source: string;
  /** The files' (or default) value a flag overrides, which is not in force. */
  overridden?: string;
  /** A restart key changed since the daemon started: the value it still runs with until a restart. */
  running?: string;
}

export interface SortColumn<T> {
  /** The column title it sorts by, as the table's header spells it. */
  title: string;
  key: (row: T) => number | string;
}

/** The sorted column (an index into the view's SORTS list) and its direction; absent: the view's own order. */
export interface SortState {
  by: number;
  desc: boolean;
}

const live = (n: NodeView) => n.sandboxes.running + n.sandboxes.paused;
const SEVERITY = { bad: 0, warn: 1 } as const;

export const SORTS = {
  nodes: [
    { title: 'NODE', key: (n) => n.nodeID },
    { title: 'CPU', key: (n) => n.usage.cpuUtilPercent },
    { title: 'MEMAV', key: (n) => n.usage.memAvailableMiB },
    { title: 'DENSITY', key: live },
    { title: 'HEAD', key: (n) => n.density.headroom },
    { title: 'DISK/MARK', key: (n) => n.usage.diskUsedPercent },
    { title: 'POOL', key: (n) => n.pool.free },
  ],
  sandboxes: [
    { title: 'SANDBOX', key: (x) => x.sandboxID },
    { title: 'TEMPLATE', key: (x) => x.templateID },
    { title: 'NODE', key: (x) => x.nodeID },
    { title: 'STATE', key: (x) => x.state },
    // Oldest first: the youngest start is the largest.
    { title: 'AGE', key: (x) => -Date.parse(x.startedAt) },
    // Live use where polled (unknown sorts lowest), else the spec.
    { title: 'CPU%', key: (x) => x.usage?.cpuPercent ?? -1 },
    { title: 'MEM', key: (x) => x.usage?.memoryBytes ?? x.spec.memoryMiB * 2 ** 20 },
    { title: 'PROCS', key: (x) => x.usage?.pids ?? -1 },
    { title: 'DISK', key: (x) => x.diskUsedBytes ?? -1 },
    { title: 'NET RX/TX', key: (x) => (x.usage?.netRxBytes ?? -1) + (x.usage?.netTxBytes ?? 0) },
    // Paused sandboxes do not time out: last.
    { title: 'LEFT', key: (x) => (x.state === 'paused' ? Infinity : Date.parse(x.endAt)) },
  ],
  pool: [
    { title: 'NODE', key: (n) => n.nodeID },
    { title: 'FREE/TOTAL', key: (n) => n.pool.free },
    { title: 'IN-FLIGHT', key: (n) => n.pool.inFlight },
    { title: 'ON-DEMAND', key: (n) => n.pool.onDemand },
    { title: 'P99', key: (n) => n.pool.waitP99Ms },
  ],
  events: [
    { title: 'TIME', key: (e) => e.id },
    { title: 'KIND', key: (e) => e.kind },
    { title: 'NODE', key: (e) => e.nodeID ?? '' },
    { title: 'CODE', key: (e) => e.code ?? 0 },
  ],
  config: [
    { title: 'PATH', key: (r) => r.path },
    { title: 'VALUE', key: (r) => r.value },
  ],
  triage: [
    { title: 'SEV', key: (f) => SEVERITY[f.severity] },
    { title: 'NODE', key: (f) => f.nodeID },
    { title: 'BOTTLENECK', key: (f) => f.bottleneck },
  ],
  templates: [
    { title: 'TEMPLATE', key: (t) => t.templateID },
    { title: 'SIZE', key: (t) => t.sizeBytes ?? -1 },
    { title: 'LAYERS', key: (t) => t.layers ?? -1 },
    { title: 'NODES', key: (t) => t.nodes.length },
  ],
  snapshots: [
    { title: 'SNAPSHOT', key: (x) => x.snapshotID },
    { title: 'NODE', key: (x) => x.nodeID },
    { title: 'TEMPLATE', key: (x) => x.templateID },
    { title: 'AGE', key: (x) => -Date.parse(x.createdAt) },
  ],
  keys: [
    { title: 'NAME', key: (k) => k.name },
    { title: 'ROLE', key: (k) => k.role },
    { title: 'SANDBOXES', key: (k) => k.usage.sandboxes },
    { title: 'VCPUS', key: (k) => k.usage.vcpus },
    { title: 'MEM', key: (k) => k.usage.memoryMiB },
    { title: 'CREATED', key: (k) => k.createdAt },
  ],
} satisfies {
  nodes: SortColumn<NodeView>[];
  sandboxes: SortColumn<SandboxRow>[];
  pool: SortColumn<NodeView>[];
  events: SortColumn<EventView>[];
  config: SortColumn<ConfigRow>[];
  triage: SortColumn<Finding>[];
  templates: SortColumn<TemplateRow>[];
  snapshots: SortColumn<SnapshotView>[];
  keys: SortColumn<KeyView>[];
} & Record<ViewName, unknown>;

/** Rows in the sort's order (a stable sort: ties keep the view's own order); the same array without a sort. */
export function sortRows<T>(rows: T[], columns: readonly SortColumn<T>[], sort: SortState | undefined): T[] {
  const col = sort ? columns[sort.by] : undefined;
  if (!col) return rows;
  const dir = sort!.desc ? -1 : 1;
  const keyed = rows.map((row, i) => ({ row, i, k: col.key(row) }));
  keyed.sort((a, b) => (a.k < b.k ? -dir : a.k > b.k ? dir : a.i - b.i));
  return keyed.map((x) => x.row);
}

/** `s`: the next column (after the last, back to the view's own order); `S`: the other direction. */
export function nextSort(view: ViewName, sort: SortState | undefined, reverse: boolean): SortState | undefined {
  if (reverse) return { by: sort?.by ?? 0, desc: !(sort?.desc ?? false) };
  const by = (sort?.by ?? -1) + 1;
  return by < SORTS[view].length ? { by, desc: false } : undefined;
}

/** The header title of the sorted column and its arrow, for the table and the status line. */
export function sortLabel(view: ViewName, sort: SortState | undefined): { title: string; arrow: string } | undefined {
  const col = sort ? SORTS[view][sort.by] : undefined;
  return col ? { title: col.title, arrow: sort!.desc ? 'v' : '^' } : undefined;
}

/** The keymap's help for `s`: every view's sort columns. */
export function sortHelp(): string {
  return (Object.keys(SORTS) as ViewName[]).map((v) => `${v}: ${SORTS[v].map((c) => c.title).join(' ')}`).join('; ');
}
