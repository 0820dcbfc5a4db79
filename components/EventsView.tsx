// The live event stream, newest first: creates, destroys, pauses, reloads, scheduling
// failures with their 1305xx code and reason. `/` filters on any field.
import React, { useMemo } from 'react';
import type { EventView } from '../src/api/types.js';
import { millis } from '../src/tui/format.js';
import { eventRows } from '../src/tui/selectors.js';
import { sortLabel } from '../src/tui/sorting.js';
import { useViewState } from '../src/tui/react.js';
import type { Tone } from '../src/tui/skins.js';
import { Table, type Column } from './Table.js';

export function eventTone(e: EventView): Tone | undefined {
  if (e.code !== undefined || /failed|error|oom|rejected|lost|exhausted/.test(e.kind)) return 'bad';
  if (/timeout|draining|cordoned/.test(e.kind)) return 'warn';
  return undefined;
}

/** HH:MM:SS in local time (events are from the last minutes; the date adds nothing). */
const clock = (iso: string) => {
  const d = new Date(iso);
  return Number.isNaN(d.getTime()) ? '-' : d.toTimeString().slice(0, 8);
};

const message = (e: EventView): string => (e.durationMs === undefined ? e.message : `${e.message} (${millis(e.durationMs)})`);

export const EVENT_COLUMNS: readonly Column<EventView>[] = [
  { title: 'TIME', width: 8, cell: (e) => clock(e.at) },
  { title: 'KIND', width: 17, cell: (e) => e.kind },
  { title: 'NODE', width: 12, cell: (e) => e.nodeID ?? '' },
  { title: 'SANDBOX', width: 14, cell: (e) => e.sandboxID ?? '' },
  { title: 'CODE', width: 6, shed: 1, cell: (e) => (e.code === undefined ? '' : String(e.code)) },
  { title: 'MESSAGE', width: 'flex', min: 20, cell: message },
];

/** The selected event whole: the message of a 130597 names every node and rule, which no column holds. */
export const eventDetail = (e: EventView): string =>
  `${e.at} ${e.kind}${e.code === undefined ? '' : ` ${e.code}`}${e.nodeID ? ` ${e.nodeID}` : ''}${e.sandboxID ? ` ${e.sandboxID}` : ''}: ${message(e)}`;

export function EventsView({ height, width }: { height: number; width: number }) {
  const { data, filter, sort, selected, skin } = useViewState('events');
  const events = data.events;
  const rows = useMemo(() => eventRows(events, filter, sort), [events, filter, sort]);
  return (
    <Table
      columns={EVENT_COLUMNS}
      rows={rows}
      rowKey={(e) => String(e.id)}
      selectedID={selected}
      height={height}
      width={width}
      skin={skin}
      sort={sortLabel('events', sort)}
      rowTone={eventTone}
      detail={eventDetail}
      empty={filter ? `no event matches "${filter}"` : 'no events yet'}
    />
  );
}
