// What an SRE read wrong at 80x24 (issue 28 item 6), one case each, on the recorded stream:
// detail lines wrapped whole, DENSITY wide enough, a paused sandbox's LEFT, DRAINING, the
// header's p99 and creating count, a restart key pending, the microVM TAP pool, wide mode.
import React from 'react';
import { describe, expect, it } from 'vitest';
import { render } from 'ink-testing-library';
import { ConfigView } from '../../components/ConfigView.js';
import { headerTotals } from '../../components/Header.js';
import { densityWidth, nodeColumns, nodeDetail, nodeState, NodesView } from '../../components/NodesView.js';
import { PoolView } from '../../components/PoolView.js';
import { left } from '../../components/SandboxesView.js';
import { Table, TableMode, type Column } from '../../components/Table.js';
import { TriageView } from '../../components/TriageView.js';
import type { NodeView, SandboxView, StatsView } from '../../src/api/types.js';
import { handleKey } from '../../src/tui/commands.js';
import { pickSkin } from '../../src/tui/skins.js';
import { setUi } from '../../src/tui/store.js';
import { recordingActions, storeFrom, withStore } from './console.js';

const firstNode = (store = storeFrom()): NodeView => Object.values(store.getState().data.nodes)[0]!;

describe('at 80 columns', () => {
  it('wraps a selected row detail whole however long (it ended in "..." after two lines)', () => {
    const long = Array.from({ length: 40 }, (_, i) => `word${i}`).join(' ') + ' FIX: the end';
    const cols: Column<{ id: string }>[] = [{ title: 'ID', width: 10, cell: (r) => r.id }];
    const { lastFrame } = render(
      <Table columns={cols} rows={[{ id: 'a' }, { id: 'b' }]} rowKey={(r) => r.id} height={14} width={40} skin={pickSkin('mono')} detail={() => long} />,
    );
    const f = lastFrame()!;
    expect(f).toContain('FIX: the end');
    expect(f).not.toContain('...');
    expect(f).toMatch(/^a/m);
  });

  it('widens DENSITY for three-digit ceilings and safe counts instead of cutting it', () => {
    const n = firstNode();
    const big = { ...n, sandboxes: { ...n.sandboxes, running: 100, paused: 0 }, density: { ...n.density, effectiveCeiling: 469, safetyBoundary: 234 } };
    expect(densityWidth([big])).toBe('100 / 469 (234 safe)'.length);
    const cols = nodeColumns(8, 80, densityWidth([big]));
    const density = cols.find((c) => c.title === 'DENSITY')!;
    expect(density.width).toBe(20);
    expect(cols.reduce((w, c) => w + (c.shed === undefined ? (c.width === 'flex' ? (c.min ?? 8) : (c.width as number)) + 1 : 0), -1)).toBeLessThanOrEqual(80);
  });

  it('says DRAINING for a healthy node being drained, and shows a paused sandbox LEFT as -', () => {
    const n = firstNode();
    expect(nodeState({ ...n, draining: true })).toBe('DRAINING');
    expect(nodeState({ ...n, draining: false })).toBe('HEALTHY');
    const sb = { state: 'paused', endAt: new Date(Date.now() - 60_000).toISOString() } as SandboxView;
    expect(left(sb, Date.now())).toBe('-');
    expect(left({ ...sb, state: 'running' }, Date.now())).toBe('expired');
  });

  it('shows no p99 without creates, and counts creating sandboxes', () => {
    const quiet = { createsLastMinute: 0, createRatePerSec: 0, createP50Ms: 0, createP99Ms: 0 } as StatsView;
    const t = { nodes: 1, schedulable: 1, running: 2, paused: 1, creating: 3 };
    const [whole] = headerTotals(t, quiet);
    expect(whole).toContain('p99 -');
    expect(whole).toContain('3 creating');
  });

  it('marks a restart key whose file value is not the one running (restart pending)', () => {
    const store = storeFrom(undefined, { view: 'config' });
    store.setState((s) => ({
      data: { ...s.data, config: { ...s.data.config!, restartPending: [{ path: 'cubelet.plugins.io.cubelet.internal.v1.network.tap_init_num', running: 4 }] } },
    }));
    store.setState((s) => ({ ui: { ...s.ui, filter: { config: 'tap_init_num' } } }));
    const f = render(withStore(store, <ConfigView height={10} width={80} />)).lastFrame()!;
    expect(f).toMatch(/tap_init_num +pending .*\(runs 4\)/);
    expect(f.split('\n').join(' ')).toContain('RESTART PENDING: the daemon runs 4 until it restarts');
  });

  it('shows the microVM TAP pool in the pool view, triage and the node detail at 80 columns', () => {
    const store = storeFrom(undefined, { view: 'pool' });
    const n = firstNode(store);
    const tapPool = { ...n.pool, free: 0, total: 2, inFlight: 1, onDemand: 3, onDemandRecent: 3 };
    store.setState((s) => ({ data: { ...s.data, nodes: { ...s.data.nodes, [n.nodeID]: { ...n, tapPool } } } }));
    expect(render(withStore(store, <PoolView height={8} width={80} />)).lastFrame()).toMatch(/TAP F\/T/);
    const t = render(withStore(store, <TriageView height={12} width={80} />)).lastFrame()!;
    expect(t).toMatch(/microVM TAP pool stall/);
    expect(nodeDetail({ ...n, tapPool })).toContain('microVM TAP pool 0/2 free');
  });

  it('shows the warm pools in the pool view (ready of wanted) and whole in its detail at 80 columns', () => {
    const store = storeFrom(undefined, { view: 'pool' });
    const n = firstNode(store);
    const warm = { templates: { 'code-interpreter': { ready: 1, starting: 1, target: 2 } }, footprintMiB: 302, hits: 12, misses: 3 };
    store.setState((s) => ({ data: { ...s.data, nodes: { ...s.data.nodes, [n.nodeID]: { ...n, warm } } } }));
    const f = render(withStore(store, <PoolView height={8} width={80} />)).lastFrame()!;
    expect(f).toMatch(/WARM/);
    expect(f).toMatch(/ 1\/2/);
    expect(f.split('\n').every((l) => l.length <= 80)).toBe(true);
    expect(f.split('\n').join(' ').replace(/ +/g, ' ')).toContain('warm pools code-interpreter 1/2 ready (1 starting), 12 hits 3 misses, holding 302');
  });

  it('w brings back the columns a narrow terminal leaves out; right pans over them', () => {
    const store = storeFrom();
    const ctx = { store, actions: recordingActions(), quit: () => {}, pageSize: () => 10 };
    const draw = () =>
      render(
        withStore(
          store,
          <TableMode.Provider value={{ wide: store.getState().ui.wide, pan: store.getState().ui.pan }}>
            <NodesView height={10} width={80} />
          </TableMode.Provider>,
        ),
      ).lastFrame()!;
    expect(draw()).not.toContain('BOUND');
    handleKey(ctx, 'w', 'w');
    expect(store.getState().ui.wide).toBe(true);
    handleKey(ctx, 'right', '');
    handleKey(ctx, 'right', '');
    handleKey(ctx, 'right', '');
    handleKey(ctx, 'right', '');
    handleKey(ctx, 'right', '');
    handleKey(ctx, 'right', '');
    const panned = draw();
    expect(panned).toMatch(/^NODE +\S/m);
    expect(panned).toContain('BOUND');
    handleKey(ctx, 'w', 'w');
    setUi(store, {});
    expect(store.getState().ui.wide).toBe(false);
  });
});
