// The config in force, flattened to `path  applies  value`; fields changed by the last reload
// stand out; APPLIES says whether a new value takes effect live or waits for a restart.
import React, { useMemo } from 'react';
import { Text } from 'ink';
import { cut } from '../src/tui/format.js';
import { configRows, type ConfigRow } from '../src/tui/selectors.js';
import { sortLabel } from '../src/tui/sorting.js';
import { useViewState } from '../src/tui/react.js';
import { colorOf } from '../src/tui/skins.js';
import { Table, type Column } from './Table.js';

export function ConfigView({ height, width }: { height: number; width: number }) {
  const { data, filter, sort, selected, skin } = useViewState('config');
  const changed = useMemo(() => new Set(data.lastChanges.map((c) => c.path)), [data.lastChanges]);
  const columns = useMemo<Column<ConfigRow>[]>(
    () => [
      { title: 'PATH', width: 56, cell: (r) => r.path, tone: (r) => (changed.has(r.path.replace(/^(master|cubelet)\./, '')) ? 'accent' : undefined) },
      { title: 'APPLIES', width: 7, cell: (r) => (r.restart ? 'restart' : 'live'), tone: (r) => (r.restart ? 'warn' : undefined) },
      { title: 'VALUE', width: 'flex', min: 10, cell: (r) => r.value },
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
      <Table columns={columns} rows={rows} rowKey={(r) => r.path} selectedID={selected} height={height - 1} width={width} skin={skin} sort={sortLabel('config', sort)} empty="no config" />
    </>
  );
}
