import React from 'react';
import { describe, expect, it } from 'vitest';
import { render } from 'ink-testing-library';
import { storeFrom, withStore } from '../test/tui/console.js';
import { loadStream } from '../test/tui/replay.js';
import { nodeColumns, nodeDetail, NodesView } from './NodesView.js';
import { columnWidths, fitColumns } from './Table.js';

// ink-testing-library's terminal is 100 columns wide: render at 100, read the cut-off
// columns through their cell functions.
const NODE_COLUMNS = nodeColumns(12);
const line = (frame: string, id: string) => frame.split('\n').find((l) => l.startsWith(id))!;

describe('NodesView', () => {
  it('shows health and schedulability apart, with the reason, and density against ceiling and safety boundary', () => {
    const store = storeFrom(loadStream('watch-handwritten.ndjson').slice(0, 1));
    const { lastFrame } = render(withStore(store, <NodesView height={6} width={100} />));
    expect(line(lastFrame()!, 'node-a')).toMatch(/^node-a +HEALTHY +yes +24% 146\.5Gi +3 \/ 117 \(58 safe\) +114 +12\.3Gi +117 +41%\/80% +30\/32$/);
    expect(line(lastFrame()!, 'node-b')).toMatch(/^node-b +HEALTHY +no: dis +24% 146\.5Gi +0 \/ 117 \(58 safe\) +117 /);
    const b = store.getState().data.nodes['node-b']!;
    expect(NODE_COLUMNS.find((c) => c.title === 'SCHEDULABLE')!.cell(b)).toBe('no: disk 83% >= 80%');
    // The selected row's verdict, whole, on a line of its own.
    expect(lastFrame()!.split('\n').slice(-3).join(' ').trimEnd()).toBe(
      'node-a schedulable | footprint 12.3Gi, headroom 114, all paused 117 at r 0 | host cpu 24%, MemAvailable 146.5Gi, disk 41%/80%',
    );
    for (const l of lastFrame()!.split('\n')) expect(l.length).toBeLessThanOrEqual(100);
  });

  it('at 80 columns keeps host cpu, MemAvailable, density, headroom, disk and pool whole; the selected verdict wraps below', () => {
    const store = storeFrom();
    store.setState((s) => ({ ui: { ...s.ui, selected: { nodes: 'node-b' } } }));
    const { lastFrame } = render(withStore(store, <NodesView height={7} width={80} />));
    const [header, ...rows] = lastFrame()!.split('\n');
    expect(header!.split(/ +/)).toEqual(['NODE', 'STATE', 'SCHEDULA', 'CPU', 'MEMAV', 'DENSITY', 'HEAD', 'DISK/MARK', 'POOL']);
    for (const l of [header!, ...rows]) expect(l.length).toBeLessThanOrEqual(80);
    expect(line(lastFrame()!, 'node-a')).toMatch(/3 \/ 117 \(58 safe\) +115 +\d+%\/80% +0\/32$/);
    expect(rows.slice(-3).join(' ').trimEnd()).toMatch(
      /^node-b NOT schedulable \(prefilter\): cordoned \| footprint 0Mi, headroom 117, all paused 117 at r 0 \| host cpu 24%, MemAvailable 146\.5Gi, disk 83%\/80%$/,
    );
  });

  it('cuts a long node id before it lets POOL go at 80 columns', () => {
    const cols = nodeColumns(40, 80);
    expect(cols[0]!.width).toBeLessThan(40);
    expect(cols.filter((c) => c.shed === undefined).reduce((w, c) => w + 1 + (c.width === 'flex' ? c.min! : c.width), -1)).toBeLessThanOrEqual(80);
  });

  it('names the rule and shows MemAvailable against the real MemTotal in the detail', () => {
    const a = storeFrom().getState().data.nodes['node-a']!;
    const hot = {
      ...a,
      schedulable: false,
      reason: 'cpu util 94.8% >= 80%',
      refusedBy: 'cpu',
      usage: { ...a.usage, cpuUtilPercent: 94.8, memTotalMiB: 257024 },
    };
    expect(nodeDetail(hot)).toMatch(
      /^node-a NOT schedulable \(cpu\): cpu util 94\.8% >= 80% \| footprint .* \| host cpu 95%, MemAvailable 146\.5Gi of 251\.0Gi/,
    );
  });

  it('after the deltas: what the release ratio frees, the disk against its watermark, the empty pool', () => {
    const store = storeFrom();
    const { lastFrame } = render(withStore(store, <NodesView height={6} width={100} />));
    expect(line(lastFrame()!, 'node-a')).toMatch(/3 \/ 117 \(58 safe\) +115 +9\.2Gi +469 /);
    expect(NODE_COLUMNS.find((c) => c.title === 'PAUS/FREE')!.cell(store.getState().data.nodes['node-a']!)).toBe('1/3.1Gi');
    expect(lastFrame()).toMatch(/node-b +HEALTHY +no: cor/);
    const a = store.getState().data.nodes['node-a']!;
    const b = store.getState().data.nodes['node-b']!;
    const cell = (title: string, n: typeof a) => NODE_COLUMNS.find((c) => c.title === title)!.cell(n);
    expect(cell('DISK/MARK', b)).toBe('83%/80%');
    expect(NODE_COLUMNS.find((c) => c.title === 'DISK/MARK')!.tone!(b)).toBe('bad');
    expect(cell('POOL', a)).toBe('0/32');
    expect(cell('WAITS', a)).toMatch(/^[_.:\-=+*#]{6}$/);
  });

  it('colours density green below the safety boundary, yellow between, red at the ceiling', () => {
    const a = storeFrom().getState().data.nodes['node-a']!;
    const tone = NODE_COLUMNS.find((c) => c.title === 'DENSITY')!.tone!;
    const at = (running: number) => tone({ ...a, sandboxes: { ...a.sandboxes, running, paused: 0 } });
    expect([at(57), at(58), at(116), at(117)]).toEqual(['ok', 'warn', 'warn', 'bad']);
  });

  it('fits every column at 140, and FOOT/QUOTA and ALLP at 120 (the whole reason is on the detail line)', () => {
    expect(fitColumns(NODE_COLUMNS, 140)).toHaveLength(NODE_COLUMNS.length);
    const w = columnWidths(NODE_COLUMNS, 140);
    expect(w.reduce((a, b) => a + b + 1, -1)).toBe(140);
    expect(fitColumns(NODE_COLUMNS, 120).map((c) => c.title)).toEqual(expect.arrayContaining(['DENSITY', 'HEAD', 'FOOT/QUOTA', 'ALLP', 'PAUS/FREE']));
  });

  it('colours density by the footprint in use the daemon reports, not by counting default-spec sandboxes', () => {
    const a = storeFrom().getState().data.nodes['node-a']!;
    const tone = NODE_COLUMNS.find((c) => c.title === 'DENSITY')!.tone!;
    // 7 small sandboxes on a node whose ceiling for the default spec is 6 (issue 16: a red `7 / 6`).
    const small = {
      ...a,
      sandboxes: { running: 7, paused: 0, creating: 0, total: 7 },
      density: { ...a.density, paperCeiling: 6, effectiveCeiling: 6, safetyBoundary: 3, memQuotaMiB: 6 * 4202, headroom: 4 },
    };
    expect(tone({ ...small, usage: { ...a.usage, quotaMemUsedMiB: 7 * 174 } })).toBe('ok');
    expect(tone({ ...small, usage: { ...a.usage, quotaMemUsedMiB: 4 * 4202 } })).toBe('warn');
    expect(tone({ ...small, density: { ...small.density, headroom: 0 }, usage: { ...a.usage, quotaMemUsedMiB: 6 * 4202 } })).toBe('bad');
    expect(NODE_COLUMNS.find((c) => c.title === 'FOOT/QUOTA')!.cell({ ...small, usage: { ...a.usage, quotaMemUsedMiB: 1218 } })).toBe('1.2Gi/24.6Gi');
  });

  it('says what the footprint is counted against: the quota, and how it relates to the host or declared memory', () => {
    const a = storeFrom().getState().data.nodes['node-a']!;
    // A 23.5 GiB host whose quota, oversold, is 105.9 GiB (issue 16: `0Mi/105.9Gi` read as the host's memory).
    const host = {
      ...a,
      capacity: { cpus: 8, memoryMiB: 24064, declared: false },
      usage: { ...a.usage, quotaMemUsedMiB: 0 },
      density: { ...a.density, memQuotaMiB: 108442 },
    };
    expect(nodeDetail(host)).toContain('| footprint 0Mi of quota 105.9Gi = 4.5x host 23.5Gi, headroom');
    expect(nodeDetail({ ...host, capacity: { cpus: 128, memoryMiB: 257024, declared: true }, density: { ...a.density, memQuotaMiB: 482048 } })).toContain(
      'footprint 0Mi of quota 470.8Gi = 1.9x declared 251.0Gi,',
    );
  });

  it('shows the disk quota held against what the store may promise, and the refusal whole at 80 columns', () => {
    const store = storeFrom();
    const b = store.getState().data.nodes['node-b']!;
    // Issue 29: the store of 12 GiB at the default oversell 20, full of default-spec quotas.
    const full = {
      ...b,
      cordoned: false,
      schedulable: false,
      refusedBy: 'disk_quota',
      reason: 'disk quota 240+10 > 240 GiB (store 12 GiB x 20 disk oversell)',
      usage: {
        ...b.usage,
        diskUsedPercent: 41,
        quotaDiskUsedGiB: 240,
        store: { kind: 'loop' as const, path: '/d/store', sizeBytes: 12 * 2 ** 30, freeBytes: 8 * 2 ** 30, usedPercent: 33 },
      },
      density: { ...b.density, diskQuotaGiB: 240 },
    };
    expect(nodeDetail(full)).toMatch(
      /^node-b NOT schedulable \(disk_quota\): disk quota 240\+10 > 240 GiB \(store 12 GiB x 20 disk oversell\) \| .*, disk 41%\/80%, quota 240\/240Gi$/,
    );
    expect(nodeDetail(b)).not.toContain('quota 0');
    store.setState((s) => ({ data: { ...s.data, nodes: { ...s.data.nodes, 'node-b': full } }, ui: { ...s.ui, selected: { nodes: 'node-b' } } }));
    const { lastFrame } = render(withStore(store, <NodesView height={7} width={80} />));
    const rows = lastFrame()!.split('\n');
    for (const l of rows) expect(l.length).toBeLessThanOrEqual(80);
    expect(rows.slice(-3).join(' ')).toContain('quota 240/240Gi');
  });

  it('sizes the NODE column to the longest id, up to a cap', () => {
    expect(nodeColumns(19)[0]!.width).toBe(19);
    expect(nodeColumns(60, 200)[0]!.width).toBe(24);
  });

  it('filters rows', () => {
    const store = storeFrom();
    store.setState((s) => ({ ui: { ...s.ui, filter: { nodes: 'node-b' } } }));
    const { lastFrame } = render(withStore(store, <NodesView height={6} width={100} />));
    expect(lastFrame()).toContain('node-b');
    expect(lastFrame()).not.toContain('node-a');
  });
});
