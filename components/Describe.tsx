// Enter on a node or sandbox: its description (src/tui/describe.ts) from live data, scrolled.
import React, { useMemo } from 'react';
import { describeNode, describeSandbox } from '../src/tui/describe.js';
import { useConsole } from '../src/tui/react.js';
import type { Pane as PaneState } from '../src/tui/store.js';
import { Pane } from './Pane.js';

export function Describe({ pane, height, width, onMax }: { pane: PaneState; height: number; width: number; onMax?: (max: number) => void }) {
  const data = useConsole((s) => s.data);
  const output = useConsole((s) => (pane.target?.kind === 'sandbox' ? s.ui.output[pane.target.id] : undefined));
  const logs = useConsole((s) => (pane.target?.kind === 'sandbox' ? s.ui.logs[pane.target.id] : undefined));
  const skin = useConsole((s) => s.settings.skin);
  const t = pane.target;
  const lines = useMemo(() => {
    if (t?.kind === 'node') {
      const n = data.nodes[t.id];
      return n ? describeNode(n, data.events) : [`node ${t.id} is gone`];
    }
    const x = t ? data.sandboxes[t.id] : undefined;
    return x ? describeSandbox(x, data.events, { output, logs }) : [`sandbox ${t?.id ?? '?'} is gone (destroyed); the events view keeps its history`];
  }, [t, data, output, logs]);
  return (
    <Pane
      title={`${t?.kind ?? ''} ${t?.id ?? ''}`}
      lines={lines}
      offset={pane.offset}
      height={height}
      width={width}
      skin={skin}
      {...(onMax ? { onMax } : {})}
    />
  );
}
