// Sandboxes: id, template, node, state, age, spec, disk use, timeout left; `/` filters, space marks.
import React, { useMemo } from 'react';
import type { SandboxView } from '../src/api/types.js';
import { age, diskUse, memUse, mib, netUse, percent, timeLeft } from '../src/tui/format.js';
import type { SandboxRow } from '../src/tui/model.js';
import { sandboxRows } from '../src/tui/selectors.js';
import { sortLabel } from '../src/tui/sorting.js';
import { useConsole, useNow, useViewState } from '../src/tui/react.js';
import type { Tone } from '../src/tui/skins.js';
import { Table, type Column } from './Table.js';

// Running is the normal state and stays plain; the rest stand out.
const STATE_TONE: Partial<Record<SandboxView['state'], Tone>> = {
  paused: 'dim',
  error: 'bad',
  lost: 'bad',
  creating: 'accent',
  destroying: 'warn',
  pausing: 'warn',
  resuming: 'warn',
};

/**
 * Time until the timeout; `-` while paused: a paused sandbox does not time out (one resumed past
 * its end gets a fresh default timeout), so counting down to `expired` misled.
 */
export function left(x: SandboxView, now: number): string {
  return x.state === 'paused' ? '-' : timeLeft(x.endAt, now);
}

/**
 * Spec and live use side by side (CPU% and MEM of the sandboxes' own limits, polled every 2 s
 * while this view shows). At 80 columns: SANDBOX NODE STATE AGE CPU% MEM PROCS LEFT; the rest
 * (DISK, NET, TEMPLATE, REASON) are in the detail line, the describe pane and wide mode (`w`).
 */
export function sandboxColumns(now: number): Column<SandboxRow>[] {
  return [
    { title: 'SANDBOX', width: 22, cell: (x) => x.sandboxID },
    { title: 'TEMPLATE', width: 12, shed: 6, cell: (x) => x.templateID },
    { title: 'NODE', width: 'flex', min: 8, cell: (x) => x.nodeID },
    { title: 'STATE', width: 9, cell: (x) => x.state, tone: (x) => STATE_TONE[x.state] },
    { title: 'AGE', width: 4, shed: 2, align: 'right', cell: (x) => age(x.startedAt, now) },
    {
      title: 'CPU%',
      width: 5,
      align: 'right',
      cell: (x) => (x.usage?.cpuPercent === undefined ? '-' : percent(x.usage.cpuPercent)),
      tone: (x) => ((x.usage?.cpuPercent ?? 0) >= 90 ? 'warn' : undefined),
    },
    {
      title: 'MEM',
      width: 11,
      align: 'right',
      cell: (x) => (x.usage ? memUse(x.usage) : mib(x.spec.memoryMiB)),
      tone: (x) => (x.usage && x.usage.memoryBytes >= 0.9 * x.usage.memoryLimitBytes ? 'warn' : undefined),
    },
    { title: 'PROCS', width: 5, shed: 3, align: 'right', cell: (x) => (x.usage ? String(x.usage.pids) : '-') },
    { title: 'DISK', width: 12, shed: 4, align: 'right', cell: diskUse },
    { title: 'NET RX/TX', width: 11, shed: 7, align: 'right', cell: (x) => netUse(x.usage) },
    { title: 'LEFT', width: 7, align: 'right', cell: (x) => left(x, now) },
    { title: 'REASON', width: 16, shed: 5, cell: (x) => x.reason ?? '' },
  ];
}

/** The selected sandbox's line of its own: state and why, where, spec, address, egress. */
export function sandboxDetail(x: SandboxRow): string {
  const egress = x.egress
    ? ` egress ${x.egress.allowInternet === false ? 'no internet' : 'internet'}${x.egress.allowOut?.length ? ` allow ${x.egress.allowOut.join(',')}` : ''}${x.egress.denyOut?.length ? ` deny ${x.egress.denyOut.join(',')}` : ''}`
    : '';
  const u = x.usage;
  const use = u
    ? ` | cpu ${u.cpuPercent === undefined ? '-' : percent(u.cpuPercent)} of ${x.spec.cpus}, mem ${memUse(u)}, ${u.pids} procs, disk ${diskUse(x)}, net rx/tx ${netUse(u)}`
    : '';
  return `${x.sandboxID} ${x.state}${x.reason ? `: ${x.reason}` : ''} | ${x.templateID} on ${x.nodeID}, ${x.spec.cpus} cpu ${mib(x.spec.memoryMiB)}, ip ${x.ip ?? '-'}, ${x.state === 'paused' ? 'paused: no timeout runs' : `ends ${x.endAt}`}${egress}${use}`;
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
  return (
    <Table
      columns={columns}
      rows={rows}
      rowKey={(x) => x.sandboxID}
      selectedID={selected}
      marked={marked}
      height={height}
      width={width}
      skin={skin}
      detail={sandboxDetail}
      sort={sortLabel('sandboxes', sort)}
      {...(marked.size ? { note: `${marked.size} marked` } : {})}
      empty={filter ? `no sandbox matches "${filter}"` : 'no sandboxes'}
    />
  );
}
