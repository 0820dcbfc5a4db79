// Against a real cubed: the watch client keeps the store equal to what the admin API
// answers through a create, pause, release-ratio change, resume, cordon, destroy, drain.
// With RECORD_FIXTURE=1 it also writes the stream to test/fixtures/watch-cubed.ndjson
// (the bench and replay tests use it). Needs `npm run build` (startDaemon runs bin/cubed).
import { writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { WatchMessage } from '../../src/api/types.js';
import { CubeClient } from '../../src/cli/client.js';
import { applyMessage, emptyData, releaseRatioOf } from '../../src/tui/model.js';
import { createConsoleStore, type ConsoleStore } from '../../src/tui/store.js';
import { startWatch } from '../../src/tui/watch.js';
import { startDaemon, type TestDaemon } from '../helpers/daemon.js';

let d: TestDaemon;
let api: CubeClient;

beforeAll(async () => {
  d = await startDaemon();
  api = new CubeClient({ baseUrl: d.url, apiKey: d.apiKey });
});
afterAll(async () => {
  await d?.stop();
});

async function until<T>(what: string, f: () => T | undefined | false, timeoutMs = 15_000): Promise<T> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const v = f();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

describe('watch stream from a real cubed', () => {
  it('keeps the store in step with the admin API and survives a daemon restart', async () => {
    const store: ConsoleStore = createConsoleStore({ apiUrl: d.url });
    const recorded: WatchMessage[] = [];
    const ac = new AbortController();
    const recording = (async () => {
      try {
        for await (const m of api.watch(ac.signal)) recorded.push(m);
      } catch (e) {
        if (!ac.signal.aborted) throw e;
      }
    })();
    const w = startWatch({ baseUrl: d.url, apiKey: d.apiKey }, store, { refreshMs: 20, backoffMinMs: 100, backoffMaxMs: 500 });
    const data = () => store.getState().data;
    try {
      await until('snapshot', () => store.getState().conn.state === 'live' && data().nodeOrder.includes(d.nodeID));
      const sb = await api.createSandbox({ timeoutSec: 120 });
      await until('sandbox running', () => data().sandboxes[sb.sandboxID]?.state === 'running');
      await until('node counts it', () => data().nodes[d.nodeID]!.sandboxes.running === 1);
      await api.pause(sb.sandboxID);
      await until('paused', () => data().sandboxes[sb.sandboxID]?.state === 'paused');
      await api.setConfig('host.quota.paused_resource_release_ratio', 0.75);
      await until('ratio in config', () => releaseRatioOf(data().config) === 0.75);
      await until('ratio in density', () => data().nodes[d.nodeID]!.density.releaseRatio === 0.75);
      await api.resume(sb.sandboxID);
      await api.cordon(d.nodeID);
      await until('cordoned', () => data().nodes[d.nodeID]!.cordoned);
      await api.uncordon(d.nodeID);
      await api.deleteSandbox(sb.sandboxID);
      await until('sandbox gone', () => !(sb.sandboxID in data().sandboxes));
      await api.drain(d.nodeID);
      await until('draining', () => data().nodes[d.nodeID]!.draining);
      const events = data().events.map((e) => e.kind);
      expect(events).toEqual(
        expect.arrayContaining(['sandbox.created', 'sandbox.paused', 'sandbox.resumed', 'sandbox.destroyed', 'node.cordoned', 'node.draining']),
      );

      // The console's state equals what the API answers now.
      const nodes = await api.nodes();
      await until(
        'node view settled',
        () =>
          JSON.stringify(data().nodes[d.nodeID]!.sandboxes) === JSON.stringify(nodes[0]!.sandboxes) &&
          data().nodes[d.nodeID]!.schedulable === nodes[0]!.schedulable,
      );
      expect(Object.keys(data().sandboxes)).toEqual((await api.sandboxes()).map((s) => s.sandboxID));

      // The same stream replayed through the pure reducer gives the same model.
      ac.abort();
      await recording;
      const replayed = recorded.reduce(applyMessage, emptyData());
      expect(replayed.nodeOrder).toEqual([d.nodeID]);
      expect(replayed.events.map((e) => e.kind)).toEqual(expect.arrayContaining(['sandbox.created', 'sandbox.destroyed']));
      if (process.env.RECORD_FIXTURE) {
        writeFileSync(fileURLToPath(new URL('../fixtures/watch-cubed.ndjson', import.meta.url)), recorded.map((m) => JSON.stringify(m)).join('\n') + '\n');
      }
      // Down: stale with a reason; back: live again from a fresh snapshot.
      // Every state change is recorded as it happens: polling could miss a short outage.
      const states: string[] = [];
      const unsubscribe = store.subscribe((s, prev) => {
        if (s.conn.state !== prev.conn.state) states.push(s.conn.state);
      });
      try {
        await d.restart();
        await until('stream down', () => states.some((s) => s !== 'live'));
        await until('live again', () => store.getState().conn.state === 'live' && states.at(-1) === 'live' && data().nodeOrder.includes(d.nodeID), 30_000);
      } finally {
        unsubscribe();
      }
    } finally {
      ac.abort();
      w.stop();
    }
  });
});
