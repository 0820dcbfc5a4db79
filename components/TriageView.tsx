// Which bottleneck is active on which node, with the numbers that prove it and the fix (on
// the selected finding's lines under the table); the categories are named, a clear one says so.
import React, { useMemo } from 'react';
import { Text } from 'ink';
import { cut } from '../src/tui/format.js';
import { findingID, triageRows } from '../src/tui/selectors.js';
import { sortLabel } from '../src/tui/sorting.js';
import { BOTTLENECK_TITLES, type Bottleneck, type Finding } from '../src/tui/triage.js';
import { useViewState } from '../src/tui/react.js';
import { colorOf } from '../src/tui/skins.js';
import { Table, type Column } from './Table.js';

export const TRIAGE_COLUMNS: readonly Column<Finding>[] = [
  { title: 'SEV', width: 4, cell: (f) => (f.severity === 'bad' ? 'BAD' : 'WARN'), tone: (f) => f.severity },
  { title: 'NODE', width: 14, cell: (f) => f.nodeID },
  { title: 'BOTTLENECK', width: 25, shed: 1, cell: (f) => BOTTLENECK_TITLES[f.bottleneck] },
  { title: 'EVIDENCE', width: 'flex', min: 20, cell: (f) => f.evidence },
];

/** The selected finding whole: what, the numbers, and what to do. */
export const findingDetail = (f: Finding): string => `${f.nodeID} ${BOTTLENECK_TITLES[f.bottleneck]}: ${f.evidence}. FIX: ${f.fix}`;

export function TriageView({ height, width }: { height: number; width: number }) {
  const { data, sort, selected, skin } = useViewState('triage');
  const findings = useMemo(() => triageRows(data, sort), [data.nodes, data.nodeOrder, data.stats, data.config, sort]);
  const active = new Set(findings.map((f) => f.bottleneck));
  // Active categories first (with how many nodes), then the clear ones: at 80 columns the tail is what gets cut.
  const all = Object.keys(BOTTLENECK_TITLES) as Bottleneck[];
  const nodesWith = (b: Bottleneck) => new Set(findings.filter((f) => f.bottleneck === b).map((f) => f.nodeID)).size;
  const on = all.filter((b) => active.has(b)).map((b) => `${BOTTLENECK_TITLES[b]}: ${nodesWith(b)}`);
  const off = all.filter((b) => !active.has(b)).map((b) => BOTTLENECK_TITLES[b]);
  const summary = [...on, off.length ? `clear: ${off.join(', ')}` : ''].filter(Boolean).join('  ');
  return (
    <>
      <Text color={colorOf(skin, findings.length ? 'warn' : 'ok')} wrap="truncate">
        {cut(`${data.nodeOrder.length} nodes  ${summary}`, width)}
      </Text>
      <Table
        columns={TRIAGE_COLUMNS}
        rows={findings}
        rowKey={findingID}
        selectedID={selected}
        height={height - 1}
        width={width}
        skin={skin}
        sort={sortLabel('triage', sort)}
        detail={findingDetail}
        empty="no bottleneck active"
      />
    </>
  );
}
