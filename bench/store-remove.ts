// Removal of a sandbox holding many files (issue 14: 200,000 files, /health p99 under 50 ms while it
// goes): a cubed this script starts, one sandbox that makes --files empty files in its writable
// layer, then DELETE /admin/v1/sandboxes/{id} while /health is asked every --interval ms; prints the
// delete's duration and /health p50/p99/max during it (and over an idle window before, as baseline).
// Run as root after `npm run build`:
//   npx tsx bench/store-remove.ts [--files 200000] [--interval 5] [--cidr 10.196.0.0/16]
import { parseArgs } from 'node:util';
import { summarizeLatencies } from '../src/bench/stats.js';
import type { SandboxView } from '../src/api/types.js';
import { adminExec, call } from '../test/helpers/daemon.js';
import { startBenchDaemon } from './daemon.js';

const { values } = parseArgs({
  options: {
    files: { type: 'string', default: '200000' },
    interval: { type: 'string', default: '5' },
    cidr: { type: 'string', default: '10.196.0.0/16' },
  },
});
const files = Number(values.files);
const intervalMs = Number(values.interval);

/** /health latencies (ms) measured one after another, `intervalMs` apart, until `done` settles. */
async function probeHealth(url: string, done: Promise<unknown>): Promise<number[]> {
  let over = false as boolean; // set when `done` settles
  void done.finally(() => (over = true));
  const out: number[] = [];
  while (!over) {
    const t0 = performance.now();
    await fetch(`${url}/health`).then((r) => r.arrayBuffer());
    out.push(performance.now() - t0);
    await new Promise((r) => setTimeout(r, intervalMs));
  }
  return out;
}

const fmt = (xs: number[]) => {
  const s = summarizeLatencies(xs);
  return `n=${xs.length} p50 ${s.p50.toFixed(1)} ms, p99 ${s.p99.toFixed(1)} ms, max ${s.max.toFixed(1)} ms`;
};

const d = await startBenchDaemon({ cidr: values.cidr!, tapInit: 4 });
try {
  const c = await call(d, 'POST', '/admin/v1/sandboxes', { templateID: 'base', timeoutSec: 3600, diskGiB: 8 });
  if (c.status !== 201) throw new Error(`create: ${c.status} ${c.text}`);
  const id = (c.json as SandboxView).sandboxID;
  const make = `import os\nfor i in range(${Math.ceil(files / 1000)}):\n    d = '/home/user/many/%d' % i\n    os.makedirs(d)\n    for j in range(1000):\n        open('%s/%d' % (d, j), 'w').close()\nprint('made')`;
  const t0 = performance.now();
  const m = await adminExec(d, id, ['python3', '-c', make]);
  if (m.stdout !== 'made\n') throw new Error(`making files: ${m.stderr}`);
  console.log(
    `${files} files made in ${((performance.now() - t0) / 1000).toFixed(1)} s; load ${(await import('node:os'))
      .loadavg()
      .map((x) => x.toFixed(1))
      .join(' ')}`,
  );

  const idle = await probeHealth(d.url, new Promise((r) => setTimeout(r, 3000)));
  const t1 = performance.now();
  const del = call(d, 'DELETE', `/admin/v1/sandboxes/${id}`);
  const during = await probeHealth(d.url, del);
  const r = await del;
  if (r.status !== 204) throw new Error(`delete: ${r.status} ${r.text}`);
  console.log(`delete of a sandbox with ${files} files: ${(performance.now() - t1).toFixed(1)} ms`);
  console.log(`/health idle:          ${fmt(idle)}`);
  console.log(`/health during delete: ${fmt(during)}`);
} finally {
  await d.stop();
}
