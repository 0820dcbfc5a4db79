// Sandboxes: id, template, node, state, age, spec, disk use, timeout left; `/` filters, space marks.
import React, { useMemo } from 'react';
import type { SandboxView } from '../src/api/types.js';
import { age, diskUse, mib, timeLeft } from '../src/tui/format.js';
import { sandboxRows } from '../src/tui/selectors.js';
import { sortLabel } from '../src/tui/sorting.js';
import { useConsole, useNow, useViewState } from '../src/tui/react.js';
import type { Tone } from '../src/tui/skins.js';
import { Table, type Column } from './Table.js';

// Running is the normal state and stays plain; the rest stand out.
const STATE_TONE: Partial<Record<SandboxView['state'], Tone>> = { paused: 'dim', error: 'bad', lost: 'bad', creating: 'accent', destroying: 'warn', pausing: 'warn', resuming: 'warn' };

export function sandboxColumns(now: number): Column<SandboxView>[] {
  return [
    { title: 'SANDBOX', width: 22, cell: (x) => x.sandboxID },
    { title: 'TEMPLATE', width: 12, shed: 1, cell: (x) => x.templateID },
    { title: 'NODE', width: 'flex', min: 8, cell: (x) => x.nodeID },
    { title: 'STATE', width: 10, cell: (x) => x.state, tone: (x) => STATE_TONE[x.state] },
    { title: 'AGE', width: 5, align: 'right', cell: (x) => age(x.startedAt, now) },
    { title: 'CPU', width: 4, shed: 3, align: 'right', cell: (x) => String(x.spec.cpus) },
    { title: 'MEM', width: 7, shed: 2, align: 'right', cell: (x) => mib(x.spec.memoryMiB) },
    { title: 'DISK', width: 13, shed: 4, align: 'right', cell: diskUse },
    { title: 'LEFT', width: 8, align: 'right', cell: (x) => timeLeft(x.endAt, now) },
    { title: 'REASON', width: 16, cell: (x) => x.reason ?? '' },
  ];
}

/** The selected sandbox's line of its own: state and why, where, spec, address, egress. */
export function sandboxDetail(x: SandboxView): string {
  const egress = x.egress ? ` egress ${x.egress.allowInternet === false ? 'no internet' : 'internet'}${x.egress.allowOut?.length ? ` allow ${x.egress.allowOut.join(',')}` : ''}${x.egress.denyOut?.length ? ` deny ${x.egress.denyOut.join(',')}` : ''}` : '';
  return `${x.sandboxID} ${x.state}${x.reason ? `: ${x.reason}` : ''} | ${x.templateID} on ${x.nodeID}, ${x.spec.cpus} cpu ${mib(x.spec.memoryMiB)}, ip ${x.ip ?? '-'}, ends ${x.endAt}${egress}`;
}

export function SandboxesView({ height, width, now: fixedNow }: { height: number; width: number; now?: number }) {
  const { data, filter, sort, selected, skin } = useViewState('sandboxes');
  const markedList = useConsole((s) => s.ui.marked);
  // Age and time left move once a second; nothing else here ticks.
  const ticking = useNow(1000, fixedNow === undefined);
  const now = fixedNow ?? ticking;
  const columns = useMemo(() => sandboxColumns(now), [now]);
  const marked = useMemo(() => new Set(markedList), [markedList]);
  const rows = useMemo(() => sandboxRows(data, filter, sort), [data, filter, sort]);
  return <Table columns={columns} rows={rows} rowKey={(x) => x.sandboxID} selectedID={selected} marked={marked} height={height} width={width} skin={skin} detail={sandboxDetail} sort={sortLabel('sandboxes', sort)} {...(marked.size ? { note: `${marked.size} marked` } : {})} empty={filter ? `no sandbox matches "${filter}"` : 'no sandboxes'} />;
}
