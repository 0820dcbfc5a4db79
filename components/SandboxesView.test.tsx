import React from 'react';
import { describe, expect, it } from 'vitest';
import { render } from 'ink-testing-library';
import { storeFrom, withStore } from '../test/tui/console.js';
import { setUi } from '../src/tui/store.js';
import { SandboxesView } from './SandboxesView.js';

const NOW = Date.parse('2026-11-30T05:40:00.000Z');

describe('SandboxesView', () => {
  it('shows id, template, node, state, age, spec and the timeout left', () => {
    const { lastFrame } = render(withStore(storeFrom(), <SandboxesView height={6} width={100} now={NOW} />));
    const lines = lastFrame()!.split('\n');
    expect(lines[0]).toMatch(/^SANDBOX +TEMPLATE +NODE +STATE +AGE +CPU +MEM +LEFT +REASON$/);
    expect(lines[1]).toMatch(/^sb-0001 +host +node-a +running +2m +1 +4\.0Gi +3m00s$/);
    expect(lines.slice(1, 4).map((l) => l.split(' ')[0])).toEqual(['sb-0001', 'sb-0003', 'sb-0004']);
    // The selected sandbox, whole, on the lines under the rows.
    expect(lines.slice(4).join(' ')).toMatch(/^sb-0001 running \| host on node-a, 1 cpu 4\.0Gi, ip \S+, ends 2026-11-30T05:43:00/);
  });

  it('at 80 columns leaves out cpu, memory and template first', () => {
    const { lastFrame } = render(withStore(storeFrom(), <SandboxesView height={6} width={80} now={NOW} />));
    const lines = lastFrame()!.split('\n');
    expect(lines[0]).toMatch(/^SANDBOX +NODE +STATE +AGE +LEFT +REASON$/);
    expect(lines[1]).toMatch(/^sb-0001 +node-a +running +2m +3m00s$/);
    for (const l of lines) expect(l.length).toBeLessThanOrEqual(80);
  });

  it('filters with / on any field and says when nothing matches', () => {
    const store = storeFrom();
    setUi(store, { filter: { sandboxes: 'paused' } });
    const { lastFrame, rerender } = render(withStore(store, <SandboxesView height={6} width={100} now={NOW} />));
    expect(lastFrame()!.split('\n').filter((l) => /^sb-\d{4} /.test(l))).toHaveLength(2);
    expect(lastFrame()).toMatch(/^sb-0003 +host/m);
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
