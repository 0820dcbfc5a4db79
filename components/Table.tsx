// Our windowed table: rows are sliced to the visible window before React sees them, each
// row is one pre-formatted line (cells padded to their widths, the line cut to the
// terminal width), and a row re-renders only when its data, widths or selection change.
import React, { createContext, memo, useContext, useMemo } from 'react';
import { Box, Text } from 'ink';
import { cut, fit, wrap } from '../src/tui/format.js';
import { colorOf, type Skin, type Tone } from '../src/tui/skins.js';

export interface Column<T> {
  title: string;
  /** Fixed width, or 'flex' for the one column that takes what is left (at least `min`). */
  width: number | 'flex';
  min?: number;
  /**
   * Rank for narrow terminals: when the columns do not fit the width, columns with a rank are
   * left out, the highest rank first, until the rest fit; columns without one always stay.
   */
  shed?: number;
  align?: 'left' | 'right';
  cell: (row: T) => string;
  tone?: (row: T) => Tone | undefined;
  /** A cell too long for its column keeps its end, led by `~` (config paths: the key name is the end). */
  keepEnd?: boolean;
}

/** A cell at its column's width: cut at the end, or for `keepEnd` columns at the start. */
const cellText = <T,>(c: Column<T>, s: string, width: number): string =>
  c.keepEnd && s.length > width && width > 1 ? fit(`~${s.slice(s.length - width + 1)}`, width) : fit(s, width, c.align);

export interface TableProps<T> {
  columns: readonly Column<T>[];
  rows: readonly T[];
  rowKey: (row: T) => string;
  selectedID?: string | undefined;
  marked?: ReadonlySet<string>;
  /** Lines available, header included. */
  height: number;
  width: number;
  skin: Skin;
  /** Tone of a whole row (cells with their own tone keep it). */
  rowTone?: (row: T) => Tone | undefined;
  empty?: string;
  /**
   * The selected row's full text (a refusal reason, an event message, triage evidence and its
   * fix), wrapped on lines of its own under the rows (at least detailLines, more when it needs
   * them): columns get cut at 80, this never is.
   */
  detail?: (row: T) => string;
  /** Lines the detail takes (default DETAIL_LINES). */
  detailLines?: number;
  /** The sorted column's title and arrow (src/tui/sorting.ts): its header title carries the arrow. */
  sort?: { title: string; arrow: string } | undefined;
  /** Said at the right of the header before the row counter (e.g. `3 marked`). */
  note?: string;
}

/** Wide mode (`w`, ui.wide/pan): every column, `pan` of them after the first scrolled past. Provided by the App. */
export const TableMode = createContext<{ wide: boolean; pan: number }>({ wide: false, pan: 0 });

/** The columns wide mode shows: all, less `pan` after the first (at least one stays after it). Pure. */
export function pannedColumns<T>(columns: readonly Column<T>[], pan: number): readonly Column<T>[] {
  const skip = Math.max(0, Math.min(pan, columns.length - 2));
  return skip ? [columns[0]!, ...columns.slice(1 + skip)] : columns;
}

/** What a marked row's first cell ends with: visible in every skin, mono included. */
export const MARK = ' *';

/** Lines the selected row's detail takes under the table. */
export const DETAIL_LINES = 2;

/** Width the columns need at least: fixed widths, the flex column's minimum, one space between. */
function neededWidth<T>(columns: readonly Column<T>[]): number {
  return columns.reduce((sum, c) => sum + (c.width === 'flex' ? (c.min ?? 8) : c.width), 0) + Math.max(0, columns.length - 1);
}

/** The columns shown at `width`: all when they fit, else without the highest `shed` ranks first (pure). */
export function fitColumns<T>(columns: readonly Column<T>[], width: number): readonly Column<T>[] {
  let shown = columns;
  while (neededWidth(shown) > width) {
    const rank = Math.max(...shown.map((c) => c.shed ?? -Infinity));
    if (rank === -Infinity) break;
    const i = shown.findIndex((c) => c.shed === rank);
    shown = [...shown.slice(0, i), ...shown.slice(i + 1)];
  }
  return shown;
}

/** Widths of the columns for the terminal width: fixed ones as given, the flex one fills. */
export function columnWidths<T>(columns: readonly Column<T>[], width: number): number[] {
  const fixed = columns.reduce((sum, c) => sum + (c.width === 'flex' ? 0 : c.width), 0) + Math.max(0, columns.length - 1);
  return columns.map((c) => (c.width === 'flex' ? Math.max(c.min ?? 8, width - fixed) : c.width));
}

/** First row of the window that keeps `selected` visible (the selection sits mid-window when it can). */
export function windowStart(count: number, selected: number, height: number): number {
  if (count <= height) return 0;
  return Math.min(Math.max(0, selected - Math.floor(height / 2)), count - height);
}

interface RowProps<T> {
  row: T;
  columns: readonly Column<T>[];
  widths: readonly number[];
  width: number;
  selected: boolean;
  marked: boolean;
  skin: Skin;
  rowTone?: ((row: T) => Tone | undefined) | undefined;
}

function RowLine<T>({ row, columns, widths, width, selected, marked, skin, rowTone }: RowProps<T>) {
  const base = rowTone?.(row);
  // Adjacent cells of one colour become one span: fewer Ink text nodes to lay out per row.
  const spans: { color: string | undefined; text: string }[] = [];
  let left = width;
  columns.forEach((c, i) => {
    if (left <= 0) return;
    const cell = i === 0 && marked ? cellText(c, c.cell(row), Math.max(0, widths[i]! - MARK.length)) + MARK : cellText(c, c.cell(row), widths[i]!);
    const text = cut((i === 0 ? '' : ' ') + cell, left);
    left -= text.length;
    const color = colorOf(skin, c.tone?.(row) ?? base);
    const last = spans[spans.length - 1];
    if (last && last.color === color) last.text += text;
    else spans.push({ color, text });
  });
  return (
    <Text inverse={selected} bold={marked} dimColor={skin.faded ?? false} wrap="truncate">
      {spans.map((sp, i) => (
        <Text key={i} color={sp.color}>
          {sp.text}
        </Text>
      ))}
    </Text>
  );
}

const Row = memo(RowLine) as typeof RowLine;

export function Table<T>({
  columns: all,
  rows,
  rowKey,
  selectedID,
  marked,
  height,
  width,
  skin,
  rowTone,
  empty,
  detail,
  detailLines: wanted = DETAIL_LINES,
  sort,
  note,
}: TableProps<T>) {
  const mode = useContext(TableMode);
  const columns = useMemo(() => (mode.wide ? pannedColumns(all, mode.pan) : fitColumns(all, width)), [all, width, mode.wide, mode.pan]);
  const widths = useMemo(() => columnWidths(columns, width), [columns, width]);
  const found = selectedID === undefined ? -1 : rows.findIndex((r) => rowKey(r) === selectedID);
  const selected = found < 0 ? 0 : found;
  const current = rows[selected];
  // The detail takes what its whole text needs (never cut, docs/console.md), at least `wanted`
  // lines so the table does not jump on short ones, and leaves the header and two rows.
  const room = detail ? Math.max(0, height - 3) : 0;
  const whole = room && current !== undefined ? wrap(detail!(current), width) : [];
  const detailLines = room >= wanted ? Math.min(room, Math.max(wanted, whole.length)) : 0;
  const detailText = detailLines ? (whole.length > detailLines ? wrap(detail!(current!), width, detailLines) : whole) : [];
  const bodyHeight = Math.max(1, height - 1 - detailLines);
  const start = windowStart(rows.length, selected, bodyHeight);
  const visible = rows.slice(start, start + bodyHeight);
  const header = cut(columns.map((c, i) => fit(c.title === sort?.title ? c.title + sort.arrow : c.title, widths[i]!, c.align)).join(' '), width);
  const position = (note ? ` ${note}` : '') + (rows.length > bodyHeight ? ` ${start + 1}-${start + visible.length} of ${rows.length}` : '');
  return (
    <>
      <Text bold color={colorOf(skin, 'title')} wrap="truncate">
        {position ? cut(header, Math.max(0, width - position.length)).padEnd(Math.max(0, width - position.length)) + position : header}
      </Text>
      {visible.length === 0 ? (
        <Text color={colorOf(skin, 'dim')}>{cut(empty ?? 'nothing to show', width)}</Text>
      ) : (
        visible.map((r, i) => {
          const key = rowKey(r);
          return (
            <Row
              key={key}
              row={r}
              columns={columns}
              widths={widths}
              width={width}
              selected={start + i === selected}
              marked={marked?.has(key) ?? false}
              skin={skin}
              rowTone={rowTone}
            />
          );
        })
      )}
      {detailLines > 0 && (
        <Box flexDirection="column" marginTop={Math.max(0, bodyHeight - Math.max(1, visible.length))} height={detailLines}>
          {detailText.map((l, i) => (
            <Text key={i} color={colorOf(skin, 'accent')} wrap="truncate">
              {l}
            </Text>
          ))}
        </Box>
      )}
    </>
  );
}
