// The config in force, flattened to `path  applies  from  value`; fields changed by the last
// reload stand out; APPLIES says whether a new value takes effect live or waits for a restart;
// FROM says where the value in force came from (file, default, or a daemon flag over the file).
import React, { useMemo } from 'react';
import { Text } from 'ink';
import { cut } from '../src/tui/format.js';
import { configRows } from '../src/tui/selectors.js';
import type { ConfigRow } from '../src/tui/sorting.js';
import { sortLabel } from '../src/tui/sorting.js';
import { useViewState } from '../src/tui/react.js';
import { colorOf } from '../src/tui/skins.js';
import { Table, type Column } from './Table.js';

/** The selected key whole: its value in force and where it came from, and what a flag overrides. */
export function configDetail(r: ConfigRow): string {
  const restart =
    r.running !== undefined ? `; RESTART PENDING: the daemon runs ${r.running} until it restarts` : r.restart ? '; a new value waits for a restart' : '';
  return `${r.path} = ${r.value}${r.source ? ` (from ${r.source})` : ''}${r.overridden ? `, over the ${r.overridden}` : ''}${restart}`;
}

export function ConfigView({ height, width }: { height: number; width: number }) {
  const { data, filter, sort, selected, skin } = useViewState('config');
  const changed = useMemo(() => new Set(data.lastChanges.map((c) => c.path)), [data.lastChanges]);
  const columns = useMemo<Column<ConfigRow>[]>(
    () => [
      {
        title: 'PATH',
        width: 'flex',
        min: 30,
        keepEnd: true,
        cell: (r) => r.path,
        tone: (r) => (changed.has(r.path.replace(/^(master|cubelet)\./, '')) ? 'accent' : undefined),
      },
      // `pending`: the value shown is the file's; the daemon still runs the one in the detail line.
      {
        title: 'APPLIES',
        width: 7,
        cell: (r) => (r.running !== undefined ? 'pending' : r.restart ? 'restart' : 'live'),
        tone: (r) => (r.running !== undefined ? 'bad' : r.restart ? 'warn' : undefined),
      },
      { title: 'FROM', width: 10, cell: (r) => r.source, tone: (r) => (r.overridden ? 'accent' : undefined) },
      { title: 'VALUE', width: 22, cell: (r) => (r.running !== undefined ? `${r.value} (runs ${r.running})` : r.value) },
    ],
    [changed],
  );
  const rows = useMemo(() => configRows(data, filter, sort), [data.config, filter, sort]);
  const c = data.config;
  return (
    <>
      <Text color={colorOf(skin, 'dim')} wrap="truncate">
        {cut(c ? `config v${c.version} loaded ${c.loadedAt}  files: ${c.files.master} ${c.files.cubelet}` : 'config not received yet', width)}
      </Text>
      <Table
        columns={columns}
        rows={rows}
        rowKey={(r) => r.path}
        selectedID={selected}
        detail={configDetail}
        height={height - 1}
        width={width}
        skin={skin}
        sort={sortLabel('config', sort)}
        empty="no config"
      />
    </>
  );
}
