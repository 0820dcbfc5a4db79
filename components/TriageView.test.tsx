import React from 'react';
import { describe, expect, it } from 'vitest';
import { render } from 'ink-testing-library';
import { storeFrom, withStore } from '../test/tui/console.js';
import { loadStream } from '../test/tui/replay.js';
import { TriageView } from './TriageView.js';

describe('TriageView', () => {
  it('names the active bottleneck per node with its numbers, and the clear ones', () => {
    const { lastFrame } = render(withStore(storeFrom(), <TriageView height={8} width={100} />));
    const lines = lastFrame()!.split('\n');
    expect(lines[0]).toMatch(/^2 nodes  disk watermark: 1  NIC allocation stall: 1  clear: creates refused, CPU starvation, memory/);
    expect(lastFrame()).toMatch(/BAD +node-a +NIC allocation stall +pool 0\/32 free, 4 waiting, 7 on-demand/);
    expect(lastFrame()).toMatch(/BAD +node-b +disk watermark +disk 83% >= watermark 80%/);
    // The selected finding whole, with its fix, under the table.
    expect(lines.slice(-2).join(' ')).toMatch(
      /^node-a NIC allocation stall: pool 0\/32 free, 4 waiting, 7 on-demand since start, wait p99 230ms \(p50 \S+\)\. FIX: raise network tap_init_num/,
    );
  });

  it('says when nothing is active', () => {
    const store = storeFrom(loadStream('watch-cubed.ndjson'));
    // Recorded on a busy build machine: calm its host CPU, the one thing that was not.
    store.setState((s) => ({
      data: { ...s.data, nodes: Object.fromEntries(Object.entries(s.data.nodes).map(([id, n]) => [id, { ...n, usage: { ...n.usage, cpuUtilPercent: 5 } }])) },
    }));
    const { lastFrame } = render(withStore(store, <TriageView height={6} width={120} />));
    expect(lastFrame()).toContain('no bottleneck active');
    expect(lastFrame()).toMatch(/^1 nodes  clear: creates refused, CPU starvation, memory oversell cashed in, disk watermark, NIC/);
  });
});
