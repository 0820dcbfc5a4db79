import React from 'react';
import { describe, expect, it } from 'vitest';
import { render } from 'ink-testing-library';
import { storeFrom, withStore } from '../test/tui/console.js';
import { loadStream } from '../test/tui/replay.js';
import { TriageView } from './TriageView.js';

describe('TriageView', () => {
  it('names the active bottleneck per node with its numbers, and the clear ones', () => {
    const { lastFrame } = render(withStore(storeFrom(), <TriageView height={6} width={100} />));
    const lines = lastFrame()!.split('\n');
    expect(lines[0]).toBe('2 nodes  memory oversell cashed in: clear  disk watermark: 1  NIC allocation stall: 1');
    expect(lastFrame()).toMatch(/BAD +node-a +NIC allocation stall +pool 0\/32 free, 4 waiting, 7 on-demand, wait p99 230ms/);
    expect(lastFrame()).toMatch(/BAD +node-b +disk watermark +disk 83% >= watermark 80%/);
  });

  it('says when nothing is active', () => {
    const { lastFrame } = render(withStore(storeFrom(loadStream('watch-cubed.ndjson')), <TriageView height={6} width={100} />));
    expect(lastFrame()).toContain('no bottleneck active');
    expect(lastFrame()).toContain('1 nodes  memory oversell cashed in: clear  disk watermark: clear  NIC allocation stall: clear');
  });
});
