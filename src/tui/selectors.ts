// Rows of each view, derived from the store data: the views render them and the keys
// navigate them, so both agree on order and filtering. Pure.
import type { EventView, KeyView, NodeView, SandboxView, SnapshotView } from '../api/types.js';
import type { DataState, TemplateRow } from './model.js';
import { leafValues, needsRestart } from '../config/introspect.js';
import { inline } from './format.js';
import { SORTS, sortRows, type ConfigRow, type SortState } from './sorting.js';
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

/** The master and cubelet config flattened to `path = value` lines, with the daemon's overrides laid over them. */
export function configRows(d: DataState, filter?: string, sort?: SortState): ConfigRow[] {
  const c = d.config;
  if (!c) return [];
  const overrides = new Map((c.overrides ?? []).map((o) => [o.path, o]));
  const inFile = c.inFile && new Set(c.inFile);
  const pending = new Map((c.restartPending ?? []).map((p) => [p.path, inline(p.running)]));
  const out: ConfigRow[] = [];
  for (const file of ['master', 'cubelet'] as const) {
    for (const { segs, value } of leafValues(c[file])) {
      const path = [file, ...segs].join('.');
      const o = overrides.get(path);
      const base = inFile ? (inFile.has(path) ? 'file' : 'default') : '';
      out.push({
        path,
        value: inline(o ? o.value : value),
        restart: needsRestart(file, segs),
        source: o?.from ?? base,
        ...(o && inline(o.value) !== inline(value) ? { overridden: `${base || 'config'} ${inline(value)}` } : {}),
        ...(pending.has(path) ? { running: pending.get(path)! } : {}),
      });
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

export function templateRows(d: DataState, filter?: string, sort?: SortState): TemplateRow[] {
  return sortRows(
    (d.templates ?? []).filter((t) => matches(filter, t.templateID, t.digest, t.source, t.build, ...t.nodes)),
    SORTS.templates,
    sort,
  );
}

export function snapshotRows(d: DataState, filter?: string, sort?: SortState): SnapshotView[] {
  return sortRows(
    (d.snapshots ?? []).filter((x) => matches(filter, x.snapshotID, x.sandboxID, x.nodeID, x.templateID, ...x.names)),
    SORTS.snapshots,
    sort,
  );
}

export function keyRows(d: DataState, filter?: string, sort?: SortState): KeyView[] {
  return sortRows(
    (d.keys ?? []).filter((k) => matches(filter, k.id, k.name, k.role, k.createdBy)),
    SORTS.keys,
    sort,
  );
}

/** Live sandboxes per template (the templates view's SANDBOXES column). */
export function sandboxesByTemplate(d: DataState): Map<string, number> {
  const out = new Map<string, number>();
  for (const id of d.sandboxOrder) {
    const t = d.sandboxes[id]!.templateID;
    out.set(t, (out.get(t) ?? 0) + 1);
  }
  return out;
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
    case 'templates':
      return templateRows(d, filter, sort).map((t) => t.templateID);
    case 'snapshots':
      return snapshotRows(d, filter, sort).map((x) => x.snapshotID);
    case 'keys':
      return keyRows(d, filter, sort).map((k) => k.id);
  }
}

/** The node the selection points at in node-centric views (triage rows name a node). */
export function selectedNodeID(view: ViewName, selected: string | undefined, ids: string[]): string | undefined {
  const id = selected && ids.includes(selected) ? selected : ids[0];
  if (!id) return undefined;
  return view === 'triage' ? id.split('/')[0] : id;
}
