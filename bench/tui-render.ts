// Console render cost per update: 50 nodes and 1000 sandboxes shaped like the stream
// recorded from a real cubed (test/fixtures/watch-cubed.ndjson), rendered by the real App
// at 120x40 (or --size COLSxROWS) through the ScreenSink the console uses; each update is one
// watch message that changes a visible row (one of the first ten, which 80x24 shows too), or one
// poll's answer (`use`: the live use of all 1000 sandboxes, every row's CPU% moved, as the usage
// poll writes it every 2 s; `keys`: the API keys view's 5 s fetch, one key's use moved). Measures
// wall time from the store update to the frame written, and the bytes written to the terminal.
//   NODE_ENV=production npx tsx bench/tui-render.ts [--updates 300] [--no-frame-cache] [--size 80x24]
//     [--views nodes,sandboxes,use,events,triage,keys]
import { EventEmitter } from 'node:events';
import React from 'react';
import { render } from 'ink';
import type { EventView, KeyView, NodeView, SandboxUsage, SandboxView, WatchMessage } from '../src/api/types.js';
import { App } from '../components/App.js';
import type { Actions } from '../src/tui/actions.js';
import { installFrameCache } from '../src/tui/frame-cache.js';
import { ScreenSink } from '../src/tui/screen.js';
import { withUsage } from '../src/tui/model.js';
import { applyBatch, createConsoleStore, setConn, setUi } from '../src/tui/store.js';
import type { ViewName } from '../src/tui/views.js';
import { loadStream } from '../test/tui/replay.js';

const arg = (name: string): string | undefined => (process.argv.includes(name) ? process.argv[process.argv.indexOf(name) + 1] : undefined);
const UPDATES = Number(arg('--updates')) || 300;
const [COLUMNS, ROWS] = (arg('--size') ?? '120x40').split('x').map(Number) as [number, number];
const VIEWS = (arg('--views') ?? 'nodes,sandboxes,use,events,triage,keys').split(',');

const recorded = loadStream('watch-cubed.ndjson');
const snap = recorded.find((m): m is Extract<WatchMessage, { type: 'snapshot' }> => m.type === 'snapshot')!.snapshot;
const nodeShape = snap.nodes[0]!;
const sbShape = recorded.find((m): m is Extract<WatchMessage, { type: 'sandbox' }> => m.type === 'sandbox')!.sandbox;

const nodeID = (i: number) => `node-${String(i).padStart(3, '0')}`;
const node = (i: number, tick: number): NodeView => ({
  ...nodeShape,
  nodeID: nodeID(i),
  sandboxes: { running: 15 + ((i + tick) % 7), paused: (i + tick) % 5, creating: 0, total: 20 },
  usage: { ...nodeShape.usage, diskUsedPercent: 40 + ((i * 7 + tick) % 45) },
  pool: { ...nodeShape.pool, free: (i + tick) % 5, recentWaitsMs: Array.from({ length: 16 }, (_, k) => ((i + k + tick) * 37) % 200) },
});
const sandbox = (i: number, tick: number): SandboxView => ({
  ...sbShape,
  sandboxID: `sb${String(i).padStart(18, '0')}`,
  nodeID: nodeID(i % 50),
  state: (i + tick) % 4 === 0 ? 'paused' : 'running',
  startedAt: new Date(Date.now() - i * 1000).toISOString(),
  endAt: new Date(Date.now() + 300_000 - tick * 1000).toISOString(),
});
const use = (i: number, tick: number): SandboxUsage => ({
  sandboxID: `sb${String(i).padStart(18, '0')}`,
  cpuPercent: (i * 7 + tick * 13) % 100,
  memoryBytes: (40 + ((i + tick) % 200)) * 2 ** 20,
  memoryLimitBytes: 4096 * 2 ** 20,
  pids: 1 + ((i + tick) % 9),
  diskUsedBytes: 2 ** 20 * (i % 500),
  diskLimitBytes: 10 * 2 ** 30,
  netRxBytes: 1000 * (i + tick),
  netTxBytes: 700 * (i + tick),
});
const apiKey = (i: number, tick: number): KeyView => ({
  id: `key-${String(i).padStart(8, '0')}`,
  name: `team-${i}`,
  role: i === 0 ? 'admin' : 'user',
  quotas: { sandboxes: 100 },
  createdAt: new Date(Date.now() - i * 86_400_000).toISOString(),
  createdBy: 'system',
  usage: { sandboxes: (i + tick) % 100, vcpus: (i + tick) % 64, memoryMiB: 256 * ((i + tick) % 100) },
  limits: { sandboxes: 100, vcpus: 0, memory_mib: 0, creates_per_sec: 0 },
});
const event = (id: number): EventView => ({
  id,
  at: new Date().toISOString(),
  kind: 'sandbox.created',
  nodeID: nodeID(id % 50),
  sandboxID: `sb${String(id % 1000).padStart(18, '0')}`,
  message: 'created from host',
  durationMs: 40 + (id % 60),
});

const store = createConsoleStore({ apiUrl: 'http://127.0.0.1:3000', skin: 'dark' });
applyBatch(store, [
  {
    type: 'snapshot',
    snapshot: {
      ...snap,
      nodes: Array.from({ length: 50 }, (_, i) => node(i, 0)),
      sandboxes: Array.from({ length: 1000 }, (_, i) => sandbox(i, 0)),
      events: Array.from({ length: 300 }, (_, i) => event(i + 1)),
    },
  },
]);
setConn(store, { state: 'live' });

let onFrame: (() => void) | null = null;
const terminal = { columns: COLUMNS, rows: ROWS, write: () => onFrame?.() };
const sink = new ScreenSink(terminal);
const noop = async () => {};
const actions: Actions = {
  reload: noop,
  setReleaseRatio: noop,
  cordon: noop,
  uncordon: noop,
  drain: noop,
  launch: noop,
  destroy: noop,
  togglePause: noop,
  setConfig: noop,
  exec: noop,
  logs: noop,
  olderEvents: async () => undefined,
};
// A keyboard that never types: the App binds keys, so Ink wants a raw-mode TTY.
class QuietStdin extends EventEmitter {
  readonly isTTY = true;
  setRawMode() {}
  setEncoding() {}
  ref() {}
  unref() {}
  resume() {}
  pause() {}
  read() {
    return null;
  }
}
// As the console does (src/tui/run.tsx): Ink's parsed lines carried between frames.
if (!process.argv.includes('--no-frame-cache')) await installFrameCache();
const ink = render(React.createElement(App, { store, actions }), {
  stdout: sink as unknown as NodeJS.WriteStream,
  stdin: new QuietStdin() as unknown as NodeJS.ReadStream,
  debug: true,
  exitOnCtrlC: false,
  patchConsole: false,
});

const pct = (xs: number[], p: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor((p / 100) * xs.length))]!;

/** One update: a watch message, or what a poll writes into the store. */
type Update = WatchMessage | ((tick: number) => void);

async function measure(label: string, view: ViewName, update: (tick: number) => Update): Promise<string> {
  setUi(store, { view });
  await new Promise((r) => setTimeout(r, 50));
  const ms: number[] = [];
  const cpu: number[] = [];
  const bytes: number[] = [];
  for (let t = 1; t <= UPDATES; t++) {
    const before = sink.bytesWritten;
    const written = new Promise<void>((r) => (onFrame = r));
    const t0 = performance.now();
    const c0 = process.cpuUsage();
    const u = update(t);
    if (typeof u === 'function') u(t);
    else applyBatch(store, [u]);
    await Promise.race([written, new Promise((r) => setTimeout(r, 1000))]);
    ms.push(performance.now() - t0);
    const c = process.cpuUsage(c0);
    cpu.push((c.user + c.system) / 1000);
    bytes.push(sink.bytesWritten - before);
  }
  onFrame = null;
  const avg = bytes.reduce((a, b) => a + b, 0) / bytes.length;
  return `| ${label} | ${pct(ms, 50).toFixed(2)} ms | ${pct(ms, 99).toFixed(2)} ms | ${Math.max(...ms).toFixed(2)} ms | ${pct(cpu, 50).toFixed(2)} ms | ${(avg / 1024).toFixed(2)} KB | ${(Math.max(...bytes) / 1024).toFixed(2)} KB |`;
}

const MEASURES: Record<string, () => Promise<string>> = {
  nodes: () => measure('nodes', 'nodes', (t) => ({ type: 'node', node: node(t % 10, t) })),
  sandboxes: () => measure('sandboxes', 'sandboxes', (t) => ({ type: 'sandbox', sandbox: sandbox(t % 10, t) })),
  use: () =>
    measure(
      'sandboxes, use poll',
      'sandboxes',
      (t) => () =>
        store.setState((s) => ({
          data: withUsage(
            s.data,
            Array.from({ length: 1000 }, (_, i) => use(i, t)),
          ),
        })),
    ),
  events: () => measure('events', 'events', (t) => ({ type: 'event', event: event(1000 + t) })),
  // Each update moves a node across the disk watermark, so the findings change.
  triage: () =>
    measure('triage', 'triage', (t) => ({ type: 'node', node: { ...node(t % 10, t), usage: { ...nodeShape.usage, diskUsedPercent: t % 2 ? 85 : 40 } } })),
  keys: () =>
    measure(
      'keys',
      'keys',
      (t) => () => store.setState((s) => ({ data: { ...s.data, keys: Array.from({ length: 50 }, (_, i) => apiKey(i, i === t % 10 ? t : 0)) } })),
    ),
};
const rows: string[] = [];
for (const v of VIEWS) rows.push(await MEASURES[v]!());
ink.unmount();
console.log(
  `tui-render: ${COLUMNS}x${ROWS}, 50 nodes, 1000 sandboxes, 50 keys, ${UPDATES} updates per view, frame cache ${process.argv.includes('--no-frame-cache') ? 'off' : 'on'}, NODE_ENV=${process.env.NODE_ENV ?? '(unset)'}`,
);
console.log('| view | update p50 | p99 | max | CPU p50 | bytes/update avg | max |\n|---|---|---|---|---|---|---|');
for (const r of rows) console.log(r);
process.exit(0);
