// Which bottleneck is active on which node, with the numbers that prove it; the three
// categories that look alike from outside are named, and a clear one says so.
import React, { useMemo } from 'react';
import { Text } from 'ink';
import { cut } from '../src/tui/format.js';
import { findingID, triageRows } from '../src/tui/selectors.js';
import { BOTTLENECK_TITLES, type Bottleneck, type Finding } from '../src/tui/triage.js';
import { useViewState } from '../src/tui/react.js';
import { colorOf } from '../src/tui/skins.js';
import { Table, type Column } from './Table.js';

export const TRIAGE_COLUMNS: readonly Column<Finding>[] = [
  { title: 'SEV', width: 4, cell: (f) => (f.severity === 'bad' ? 'BAD' : 'WARN'), tone: (f) => f.severity },
  { title: 'NODE', width: 14, cell: (f) => f.nodeID },
  { title: 'BOTTLENECK', width: 25, cell: (f) => BOTTLENECK_TITLES[f.bottleneck] },
  { title: 'EVIDENCE', width: 'flex', min: 20, cell: (f) => f.evidence },
];

export function TriageView({ height, width }: { height: number; width: number }) {
  const { data, selected, skin } = useViewState('triage');
  const findings = useMemo(() => triageRows(data), [data.nodes, data.nodeOrder]);
  const active = new Set(findings.map((f) => f.bottleneck));
  const summary = (Object.keys(BOTTLENECK_TITLES) as Bottleneck[])
    .map((b) => `${BOTTLENECK_TITLES[b]}: ${active.has(b) ? new Set(findings.filter((f) => f.bottleneck === b).map((f) => f.nodeID)).size : 'clear'}`)
    .join('  ');
  return (
    <>
      <Text color={colorOf(skin, findings.length ? 'warn' : 'ok')} wrap="truncate">
        {cut(`${data.nodeOrder.length} nodes  ${summary}`, width)}
      </Text>
      <Table columns={TRIAGE_COLUMNS} rows={findings} rowKey={findingID} selectedID={selected} height={height - 1} width={width} skin={skin} empty="no bottleneck active" />
    </>
  );
}
