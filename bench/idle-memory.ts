// Host memory per idle sandbox: MemAvailable before and after N sandboxes created through the
// E2B API of a cubed this script starts (network slot, cgroups, overlay root, init: everything a
// sandbox costs the host), divided by N; then all are deleted before the next N.
// MemAvailable is machine-wide: other processes moving memory meanwhile show up in the figure, so
// the charge of the node's memory cgroup (every sandbox's processes, page cache and kernel memory
// of its own; not the pool's netns, made by the daemon) is printed beside it.
// Run as root after `npm run build`: npx tsx bench/idle-memory.ts [--counts 100,1000] [--concurrency 10]
import { existsSync, readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { E2bHttp } from '../src/bench/e2b-http.js';
import { Cgroups } from '../src/runtime/ns/cgroups.js';
import { startBenchDaemon } from './daemon.js';

const { values } = parseArgs({
  options: {
    counts: { type: 'string', default: '100,1000' },
    concurrency: { type: 'string', default: '10' },
    cidr: { type: 'string', default: '10.196.0.0/16' },
  },
});
const counts = values.counts!.split(',').map(Number);
const concurrency = Number(values.concurrency);
const SETTLE_MS = 10_000;

const memAvailableMiB = () => Number(/MemAvailable:\s+(\d+)/.exec(readFileSync('/proc/meminfo', 'utf8'))![1]) / 1024;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Runs f over items with at most `c` in flight. */
async function pool<T>(items: T[], c: number, f: (x: T) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: c }, async () => {
      while (next < items.length) await f(items[next++]!);
    }),
  );
}

// pids: 1000 inits plus the daemon's own; the default spec is what the density model admits.
const d = await startBenchDaemon({ cidr: values.cidr!, tapInit: 32, master: { scheduler: { node_max_mvm_num: 5000 } } });
const nodeMemcg = new Cgroups(d.tag, readFileSync('/proc/self/mounts', 'utf8'), readFileSync(`/proc/${d.pid}/cgroup`, 'utf8')).parents.memory;
// The node parent exists only while it has sandboxes (cubed removes it when it holds none).
const memcgMiB = () => (existsSync(nodeMemcg) ? Number(readFileSync(`${nodeMemcg}/memory.usage_in_bytes`, 'utf8')) / 2 ** 20 : 0);
try {
  const http = new E2bHttp({ apiUrl: d.url, apiKey: d.apiKey });
  for (const n of counts) {
    await sleep(SETTLE_MS);
    const before = memAvailableMiB();
    const memcgBefore = memcgMiB();
    const ids: string[] = [];
    const t0 = Date.now();
    await pool(
      Array.from({ length: n }, (_, i) => i),
      concurrency,
      async () => {
        ids.push((await http.create({ templateID: 'base', timeout: 3600 })).sandboxID);
      },
    );
    const createSec = (Date.now() - t0) / 1000;
    await sleep(SETTLE_MS);
    const after = memAvailableMiB();
    const memcg = (memcgMiB() - memcgBefore) / n;
    const load = readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ');
    console.log(
      `N=${n}: MemAvailable ${before.toFixed(0)} -> ${after.toFixed(0)} MiB, ${((before - after) / n).toFixed(2)} MiB per idle sandbox; node memcg ${(memcg * 1024).toFixed(0)} KiB per sandbox (created in ${createSec.toFixed(1)} s; load ${load})`,
    );
    await pool(ids, concurrency, (id) => http.kill(id));
  }
} finally {
  await d.stop();
}
