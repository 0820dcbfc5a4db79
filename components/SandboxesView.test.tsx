import React from 'react';
import { describe, expect, it } from 'vitest';
import { render } from 'ink-testing-library';
import { storeFrom, withStore } from '../test/tui/console.js';
import { setUi } from '../src/tui/store.js';
import { withUsage } from '../src/tui/model.js';
import { SandboxesView } from './SandboxesView.js';

const NOW = Date.parse('2026-11-30T05:40:00.000Z');

describe('SandboxesView', () => {
  it('shows id, template, node, state, age, use and the timeout left', () => {
    const { lastFrame } = render(withStore(storeFrom(), <SandboxesView height={6} width={100} now={NOW} />));
    const lines = lastFrame()!.split('\n');
    expect(lines[0]).toMatch(/^SANDBOX +NODE +STATE +AGE +CPU% +MEM +PROCS +DISK +LEFT$/);
    // Before the first poll: the spec's memory, no use.
    expect(lines[1]).toMatch(/^sb-0001 +node-a +running +2m +- +4\.0Gi +- +-\/\d+Gi +3m00s$/);
    expect(lines.slice(1, 4).map((l) => l.split(' ')[0])).toEqual(['sb-0001', 'sb-0003', 'sb-0004']);
    // The selected sandbox, whole, on the lines under the rows.
    expect(lines.slice(4).join(' ')).toMatch(/^sb-0001 running \| host on node-a, 1 cpu 4\.0Gi, ip \S+, ends 2026-11-30T05:43:00/);
  });

  it('at 80 columns keeps CPU%, MEM and PROCS of the live use (polled) and leaves out net, template, reason, disk', () => {
    const store = storeFrom();
    store.setState((s) => ({
      data: withUsage(s.data, [
        {
          sandboxID: 'sb-0001',
          cpuPercent: 97.4,
          memoryBytes: 200 * 2 ** 20,
          memoryLimitBytes: 4096 * 2 ** 20,
          pids: 7,
          diskLimitBytes: 2 ** 30,
          netRxBytes: 5000,
          netTxBytes: 300,
        },
      ]),
    }));
    const { lastFrame } = render(withStore(store, <SandboxesView height={8} width={80} now={NOW} />));
    const lines = lastFrame()!.split('\n');
    expect(lines[0]).toMatch(/^SANDBOX +NODE +STATE +AGE +CPU% +MEM +PROCS +LEFT$/);
    expect(lines[1]).toMatch(/^sb-0001 +node-a +running +2m +97% +200Mi\/4\.0Gi +7 +3m00s$/);
    for (const l of lines) expect(l.length).toBeLessThanOrEqual(80);
    // The rest of the use is on the detail line.
    expect(lines.slice(4).join(' ').replace(/ +/g, ' ')).toContain('| cpu 97% of 1, mem 200Mi/4.0Gi, 7 procs, disk -/10Gi, net rx/tx 4.9K/300B');
  });

  it('sorts by CPU% (the cpu triage fix: find what burns CPU)', async () => {
    const store = storeFrom();
    store.setState((s) => ({
      data: withUsage(s.data, [
        { sandboxID: 'sb-0001', cpuPercent: 3, memoryBytes: 1, memoryLimitBytes: 2, pids: 1, diskLimitBytes: 1 },
        { sandboxID: 'sb-0004', cpuPercent: 99, memoryBytes: 1, memoryLimitBytes: 2, pids: 1, diskLimitBytes: 1 },
      ]),
    }));
    const { SORTS } = await import('../src/tui/sorting.js');
    setUi(store, { sort: { sandboxes: { by: SORTS.sandboxes.findIndex((c) => c.title === 'CPU%'), desc: true } } });
    const { lastFrame } = render(withStore(store, <SandboxesView height={6} width={80} now={NOW} />));
    expect(lastFrame()!.split('\n')[0]).toMatch(/CPU%v/);
    expect(lastFrame()!.split('\n')[1]).toMatch(/^sb-0004 .* 99% /);
  });

  it('filters with / on any field and says when nothing matches', () => {
    const store = storeFrom();
    setUi(store, { filter: { sandboxes: 'paused' } });
    const { lastFrame, rerender } = render(withStore(store, <SandboxesView height={6} width={100} now={NOW} />));
    expect(
      lastFrame()!
        .split('\n')
        .filter((l) => /^sb-\d{4} /.test(l)),
    ).toHaveLength(2);
    expect(lastFrame()).toMatch(/^sb-0003 +node-a/m);
    expect(lastFrame()).toMatch(/^sb-0003 paused \|/m);
    setUi(store, { filter: { sandboxes: 'zzz' } });
    rerender(withStore(store, <SandboxesView height={6} width={100} now={NOW} />));
    expect(lastFrame()).toContain('no sandbox matches "zzz"');
  });

  it('keeps the selection by id while rows come and go', () => {
    const store = storeFrom();
    setUi(store, { selected: { sandboxes: 'sb-0004' } });
    const { lastFrame } = render(withStore(store, <SandboxesView height={3} width={100} now={NOW} />));
    expect(lastFrame()!.split('\n')[0]).toMatch(/ 2-3 of 3$/);
    expect(lastFrame()).toContain('sb-0004');
  });
});
