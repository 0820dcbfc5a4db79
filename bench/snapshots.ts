// E2B snapshots and fork through a real cubed's E2B REST API (what the SDK sends): snapshot of an
// idle sandbox, create from a snapshot against create from its template (alternating, same
// daemon, same window), and fork of N. Each sandbox holds a few files written before the
// snapshot; a pause of the same sandbox is the snapshot's baseline. Needs `npm run build` first.
//   npx tsx bench/snapshots.ts [--snapshots 50] [--creates 40] [--fork 20] [--rounds 3] [--cidr 10.197.0.0/16]
import { parseArgs } from 'node:util';
import { percentile } from '../src/model/stats.js';
import { adminExec } from '../test/helpers/daemon.js';
import { startBenchDaemon } from './daemon.js';

const { values } = parseArgs({
  options: {
    snapshots: { type: 'string', default: '50' },
    creates: { type: 'string', default: '40' },
    fork: { type: 'string', default: '20' },
    rounds: { type: 'string', default: '3' },
    cidr: { type: 'string', default: '10.197.0.0/16' },
  },
});
const d = await startBenchDaemon({ cidr: values.cidr!, tapInit: Number(values.fork) + 8 });
const api = async (method: string, path: string, body?: unknown): Promise<unknown> => {
  const r = await fetch(`${d.url}${path}`, {
    method,
    headers: { 'x-api-key': d.apiKey, 'content-type': 'application/json' },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  const text = await r.text();
  if (!r.ok) throw new Error(`${method} ${path}: ${r.status} ${text}`);
  return text ? JSON.parse(text) : undefined;
};
const timed = async <T>(fn: () => Promise<T>): Promise<[number, T]> => {
  const t0 = performance.now();
  const v = await fn();
  return [performance.now() - t0, v];
};
const stats = (raw: number[]) => {
  const xs = [...raw].sort((a, b) => a - b);
  return { n: xs.length, p50: +percentile(xs, 50).toFixed(1), p90: +percentile(xs, 90).toFixed(1), max: +xs[xs.length - 1]!.toFixed(1) };
};
const create = async (templateID?: string) =>
  ((await api('POST', '/sandboxes', { ...(templateID ? { templateID } : {}), timeout: 600 })) as { sandboxID: string }).sandboxID;
const kill = (id: string) => api('DELETE', `/sandboxes/${id}`);

try {
  const origin = await create();
  await adminExec(d, origin, ['sh', '-c', 'mkdir -p /home/user/w && for i in $(seq 1 200); do head -c 4096 /dev/urandom > /home/user/w/f$i; done']);

  // Baseline in the same window: a pause (the freeze a snapshot also does, one request), interleaved.
  const snapMs: number[] = [];
  const pauseMs: number[] = [];
  const snaps: string[] = [];
  for (let i = 0; i < Number(values.snapshots); i++) {
    const [ms, s] = await timed(() => api('POST', `/sandboxes/${origin}/snapshots`, {}) as Promise<{ snapshotID: string }>);
    snapMs.push(ms);
    snaps.push(s.snapshotID);
    pauseMs.push((await timed(() => api('POST', `/sandboxes/${origin}/pause`, {})))[0]);
    await api('POST', `/sandboxes/${origin}/connect`, { timeout: 600 });
  }
  const snapshotID = snaps[0]!;
  for (const s of snaps.slice(1)) await api('DELETE', `/templates/${s}`);

  const fromTemplate: number[] = [];
  const fromSnapshot: number[] = [];
  for (let i = 0; i < Number(values.creates); i++) {
    for (const [list, t] of (i % 2
      ? [
          [fromSnapshot, snapshotID],
          [fromTemplate, undefined],
        ]
      : [
          [fromTemplate, undefined],
          [fromSnapshot, snapshotID],
        ]) as [number[], string | undefined][]) {
      const [ms, id] = await timed(() => create(t));
      list.push(ms);
      await kill(id);
    }
  }

  // The node's own part of each create (the sandbox.created event's duration), by kind.
  const created = ((await api('GET', '/admin/v1/events?limit=10000')) as { kind: string; message: string; durationMs?: number }[]).filter(
    (e) => e.kind === 'sandbox.created' && e.durationMs !== undefined,
  );
  const nodeSide = {
    fromTemplate: stats(created.filter((e) => !e.message.includes('snapshot')).map((e) => e.durationMs!)),
    fromSnapshot: stats(created.filter((e) => e.message.includes('snapshot')).map((e) => e.durationMs!)),
  };

  const forkMs: number[] = [];
  for (let r = 0; r < Number(values.rounds); r++) {
    const [ms, results] = await timed(
      () => api('POST', `/sandboxes/${origin}/fork`, { count: Number(values.fork) }) as Promise<{ sandbox?: { sandboxID: string }; error?: unknown }[]>,
    );
    const failed = results.filter((x) => !x.sandbox);
    if (failed.length) throw new Error(`fork: ${failed.length} failed: ${JSON.stringify(failed[0])}`);
    forkMs.push(ms);
    await Promise.all(results.map((x) => kill(x.sandbox!.sandboxID)));
  }
  await api('DELETE', `/templates/${snapshotID}`);
  await kill(origin);
  const t = stats(fromTemplate);
  const s = stats(fromSnapshot);
  console.log(
    JSON.stringify(
      {
        snapshotIdle: stats(snapMs),
        pauseBaseline: stats(pauseMs),
        createFromTemplate: t,
        createFromSnapshot: s,
        snapshotOverTemplateP50: +(s.p50 / t.p50).toFixed(2),
        [`fork${values.fork}`]: stats(forkMs),
        nodeSideCreate: nodeSide,
      },
      null,
      1,
    ),
  );
} finally {
  await d.stop();
}
