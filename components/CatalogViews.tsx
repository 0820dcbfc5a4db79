// Templates and snapshots (views 7 and 8): what a node can start sandboxes from; API keys (view 9):
// who may start them, with their quotas and what they hold of them. None is on the watch stream;
// src/tui/catalog.ts fetches each while its view shows.
import React, { useMemo } from 'react';
import type { KeyView, SnapshotView } from '../src/api/types.js';
import { age, bytes, mib } from '../src/tui/format.js';
import type { TemplateRow } from '../src/tui/model.js';
import { useNow, useViewState } from '../src/tui/react.js';
import { keyRows, sandboxesByTemplate, snapshotRows, templateRows } from '../src/tui/selectors.js';
import { sortLabel } from '../src/tui/sorting.js';
import type { Tone } from '../src/tui/skins.js';
import { Table, type Column } from './Table.js';

/** The digest as `docker images` shortens it: 12 hex digits after the algorithm. */
const shortDigest = (d: string | undefined) => (d ? d.replace(/^sha256:/, '').slice(0, 12) : '-');

export function templateColumns(using: Map<string, number>): Column<TemplateRow>[] {
  return [
    { title: 'TEMPLATE', width: 'flex', min: 12, cell: (t) => t.templateID },
    { title: 'DIGEST', width: 12, shed: 2, cell: (t) => shortDigest(t.digest) },
    { title: 'SIZE', width: 6, align: 'right', cell: (t) => bytes(t.sizeBytes) },
    { title: 'LAYERS', width: 6, align: 'right', cell: (t) => (t.layers === undefined ? '-' : String(t.layers)) },
    {
      title: 'BUILD',
      width: 9,
      cell: (t) => t.build ?? (t.source === 'build' ? '?' : (t.source ?? '-')),
      tone: (t) => (t.build === 'error' ? 'bad' : t.build === 'building' ? 'warn' : undefined),
    },
    { title: 'NODES', width: 5, align: 'right', cell: (t) => String(t.nodes.length) },
    { title: 'SANDBOXES', width: 9, align: 'right', cell: (t) => String(using.get(t.templateID) ?? 0) },
    { title: 'CREATED', width: 10, shed: 1, cell: (t) => t.created?.slice(0, 10) ?? '-' },
  ];
}

/** The selected template whole: digest, which nodes hold it, its build. */
export const templateDetail =
  (using: Map<string, number>) =>
  (t: TemplateRow): string =>
    `${t.templateID} ${t.digest ?? ''} | ${t.layers ?? '-'} layers, ${bytes(t.sizeBytes)}, from ${t.source ?? '-'}${t.buildID ? `, build ${t.buildID} ${t.build ?? ''}` : ''} | on ${t.nodes.join(', ') || 'no node'} | ${using.get(t.templateID) ?? 0} sandbox(es) use it`;

export function TemplatesView({ height, width }: { height: number; width: number }) {
  const { data, filter, sort, selected, skin } = useViewState('templates');
  const using = useMemo(() => sandboxesByTemplate(data), [data.sandboxes, data.sandboxOrder]);
  const columns = useMemo(() => templateColumns(using), [using]);
  const detail = useMemo(() => templateDetail(using), [using]);
  return (
    <Table
      columns={columns}
      rows={templateRows(data, filter, sort)}
      rowKey={(t) => t.templateID}
      selectedID={selected}
      height={height}
      width={width}
      skin={skin}
      detail={detail}
      sort={sortLabel('templates', sort)}
      empty={data.templates === null ? 'loading templates...' : 'no templates'}
    />
  );
}

export function snapshotColumns(now: number): Column<SnapshotView>[] {
  return [
    { title: 'SNAPSHOT', width: 'flex', min: 12, cell: (x) => x.snapshotID },
    { title: 'NAMES', width: 14, shed: 2, cell: (x) => x.names.join(',') },
    { title: 'FROM SANDBOX', width: 20, shed: 1, cell: (x) => x.sandboxID },
    { title: 'NODE', width: 10, cell: (x) => x.nodeID },
    { title: 'TEMPLATE', width: 10, cell: (x) => x.templateID },
    { title: 'KEEPS', width: 17, shed: 3, cell: (x) => x.keeps },
    { title: 'AGE', width: 4, align: 'right', cell: (x) => age(x.createdAt, now) },
  ];
}

export const snapshotDetail = (x: SnapshotView): string =>
  `${x.snapshotID}${x.names.length ? ` (${x.names.join(', ')})` : ''} | from ${x.sandboxID} on ${x.nodeID}, template ${x.templateID}, ${x.runtime} keeps ${x.keeps}, spec ${x.spec.cpus} cpu ${x.spec.memoryMiB}Mi | taken ${x.createdAt}`;

export function SnapshotsView({ height, width }: { height: number; width: number }) {
  const { data, filter, sort, selected, skin } = useViewState('snapshots');
  const now = useNow(1000);
  const columns = useMemo(() => snapshotColumns(now), [now]);
  return (
    <Table
      columns={columns}
      rows={snapshotRows(data, filter, sort)}
      rowKey={(x) => x.snapshotID}
      selectedID={selected}
      height={height}
      width={width}
      skin={skin}
      detail={snapshotDetail}
      sort={sortLabel('snapshots', sort)}
      empty={data.snapshots === null ? 'loading snapshots...' : 'no snapshots'}
    />
  );
}

/** `used/limit`, `-` where the limit is 0 (none). */
const ofLimit = (used: string, limit: number, unit: (n: number) => string = String) => `${used}/${limit > 0 ? unit(limit) : '-'}`;
const cpus = (n: number) => String(Math.round(n * 100) / 100);
/** A quota at its limit is the refusal's cause (429): bad; within 20% of it: warn. */
const nearLimit = (used: number, limit: number): Tone | undefined =>
  limit <= 0 ? undefined : used >= limit ? 'bad' : used >= 0.8 * limit ? 'warn' : undefined;

export const keyColumns: Column<KeyView>[] = [
  { title: 'KEY', width: 12, cell: (k) => k.id },
  { title: 'NAME', width: 'flex', min: 8, cell: (k) => k.name },
  { title: 'ROLE', width: 5, cell: (k) => k.role },
  {
    title: 'SANDBOXES',
    width: 9,
    align: 'right',
    cell: (k) => ofLimit(String(k.usage.sandboxes), k.limits.sandboxes),
    tone: (k) => nearLimit(k.usage.sandboxes, k.limits.sandboxes),
  },
  {
    title: 'VCPUS',
    width: 7,
    align: 'right',
    cell: (k) => ofLimit(cpus(k.usage.vcpus), k.limits.vcpus, cpus),
    tone: (k) => nearLimit(k.usage.vcpus, k.limits.vcpus),
  },
  {
    title: 'MEM',
    width: 13,
    align: 'right',
    cell: (k) => ofLimit(mib(k.usage.memoryMiB), k.limits.memory_mib, mib),
    tone: (k) => nearLimit(k.usage.memoryMiB, k.limits.memory_mib),
  },
  { title: 'CREATE/S', width: 8, align: 'right', cell: (k) => (k.limits.creates_per_sec > 0 ? String(k.limits.creates_per_sec) : '-') },
  { title: 'CREATED', width: 10, shed: 1, cell: (k) => k.createdAt.slice(0, 10) },
  { title: 'BY', width: 12, shed: 2, cell: (k) => k.createdBy },
];

/** The selected key whole: what it holds of each quota, which quotas are its own (the rest follow the defaults), who made it. Never the key. */
export const keyDetail = (k: KeyView): string => {
  const own = Object.entries(k.quotas).map(([q, v]) => `${q}=${v === 0 ? 'none' : v}`);
  const lim = (n: number, unit: (n: number) => string = String) => (n > 0 ? `of ${unit(n)}` : '(no limit)');
  return `${k.id} ${k.name}, ${k.role} | holds ${k.usage.sandboxes} sandbox(es) ${lim(k.limits.sandboxes)}, ${cpus(k.usage.vcpus)} vCPU ${lim(k.limits.vcpus, cpus)}, ${mib(k.usage.memoryMiB)} ${lim(k.limits.memory_mib, mib)}, creates/s ${lim(k.limits.creates_per_sec)} | ${own.length ? `own quotas ${own.join(' ')}, the rest default` : 'default quotas'} | created ${k.createdAt} by ${k.createdBy}`;
};

export function KeysView({ height, width }: { height: number; width: number }) {
  const { data, filter, sort, selected, skin } = useViewState('keys');
  return (
    <Table
      columns={keyColumns}
      rows={keyRows(data, filter, sort)}
      rowKey={(k) => k.id}
      selectedID={selected}
      height={height}
      width={width}
      skin={skin}
      detail={keyDetail}
      sort={sortLabel('keys', sort)}
      empty={data.keys === null ? 'loading keys...' : 'no keys'}
    />
  );
}
