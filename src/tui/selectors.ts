// Rows of each view, derived from the store data: the views render them and the keys
// navigate them, so both agree on order and filtering. Pure.
import type { EventView, NodeView, SandboxView } from '../api/types.js';
import type { DataState } from './model.js';
import { leafValues, needsRestart } from '../config/introspect.js';
import { inline } from './format.js';
import { SORTS, sortRows, type SortState } from './sorting.js';
import { triage, type Finding } from './triage.js';
import type { ViewName } from './views.js';

const matches = (filter: string | undefined, ...fields: (string | undefined)[]): boolean => {
  if (!filter) return true;
  const f = filter.toLowerCase();
  return fields.some((x) => x !== undefined && x.toLowerCase().includes(f));
};

/** Nodes by id; `view` names whose sort columns apply (the nodes and pool tables sort differently). */
export function nodeRows(d: DataState, filter?: string, sort?: SortState, view: 'nodes' | 'pool' = 'nodes'): NodeView[] {
  return sortRows(
    d.nodeOrder.map((id) => d.nodes[id]!).filter((n) => matches(filter, n.nodeID, n.reason, n.address)),
    SORTS[view],
    sort,
  );
}

export function sandboxRows(d: DataState, filter?: string, sort?: SortState): SandboxView[] {
  return sortRows(
    d.sandboxOrder.map((id) => d.sandboxes[id]!).filter((x) => matches(filter, x.sandboxID, x.templateID, x.nodeID, x.state)),
    SORTS.sandboxes,
    sort,
  );
}

/** Newest first: the operator looks at what just happened. */
export function eventRows(events: readonly EventView[], filter?: string, sort?: SortState): EventView[] {
  const out: EventView[] = [];
  for (let i = events.length - 1; i >= 0; i--) {
    const e = events[i]!;
    if (matches(filter, e.kind, e.nodeID, e.sandboxID, e.message, e.code === undefined ? undefined : String(e.code))) out.push(e);
  }
  return sortRows(out, SORTS.events, sort);
}

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
}

/** The master and cubelet config flattened to `path = value` lines, with the daemon's overrides laid over them. */
export function configRows(d: DataState, filter?: string, sort?: SortState): ConfigRow[] {
  const c = d.config;
  if (!c) return [];
  const overrides = new Map((c.overrides ?? []).map((o) => [o.path, o]));
  const inFile = c.inFile && new Set(c.inFile);
  const out: ConfigRow[] = [];
  for (const file of ['master', 'cubelet'] as const) {
    for (const { segs, value } of leafValues(c[file])) {
      const path = [file, ...segs].join('.');
      const o = overrides.get(path);
      const base = inFile ? (inFile.has(path) ? 'file' : 'default') : '';
      out.push({ path, value: inline(o ? o.value : value), restart: needsRestart(file, segs), source: o?.from ?? base, ...(o && inline(o.value) !== inline(value) ? { overridden: `${base || 'config'} ${inline(value)}` } : {}) });
    }
  }
  return sortRows(
    out.filter((r) => matches(filter, r.path, r.value, r.source)),
    SORTS.config,
    sort,
  );
}

export function triageRows(d: DataState, sort?: SortState): Finding[] {
  const cap = (d.config?.master as { scheduler?: { node_max_cpu_util?: unknown } } | undefined)?.scheduler?.node_max_cpu_util;
  return sortRows(triage(nodeRows(d), { stats: d.stats, ...(typeof cap === 'number' ? { cpuCapPercent: cap } : {}) }), SORTS.triage, sort);
}

export const findingID = (f: Finding): string => `${f.nodeID}/${f.bottleneck}`;

/** Ids of the rows the view shows, in order (what selection moves over). */
export function rowIDs(view: ViewName, d: DataState, filter?: string, sort?: SortState): string[] {
  switch (view) {
    case 'nodes':
    case 'pool':
      return nodeRows(d, filter, sort, view).map((n) => n.nodeID);
    case 'sandboxes':
      return sandboxRows(d, filter, sort).map((x) => x.sandboxID);
    case 'events':
      return eventRows(d.events, filter, sort).map((e) => String(e.id));
    case 'config':
      return configRows(d, filter, sort).map((r) => r.path);
    case 'triage':
      return triageRows(d, sort).map(findingID);
  }
}

/** The node the selection points at in node-centric views (triage rows name a node). */
export function selectedNodeID(view: ViewName, selected: string | undefined, ids: string[]): string | undefined {
  const id = selected && ids.includes(selected) ? selected : ids[0];
  if (!id) return undefined;
  return view === 'triage' ? id.split('/')[0] : id;
}
