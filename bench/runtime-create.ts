// The ns runtime driver on its own (no network slot: each sandbox gets a fresh empty netns):
// serial create/destroy, creates 20 at a time, pause/resume, exec, and host memory per idle
// sandbox with 100 running (MemAvailable delta / N).
// Run as root: npx tsx bench/runtime-create.ts [--serial 100] [--concurrent 20] [--rounds 5] [--idle 100]
import { readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import { percentile } from '../src/model/stats.js';
import { newSandboxID, nodeTag } from '../src/ids.js';
import { NsDriver } from '../src/runtime/ns/driver.js';
import { TemplateStore } from '../src/templates/store.js';
import type { LaunchSpec, SandboxHandle } from '../src/runtime/types.js';

const { values } = parseArgs({
  options: {
    serial: { type: 'string', default: '100' },
    concurrent: { type: 'string', default: '20' },
    rounds: { type: 'string', default: '5' },
    idle: { type: 'string', default: '100' },
  },
});
const n = (k: keyof typeof values) => Number(values[k]);

const dataDir = await mkdtemp(join(tmpdir(), 'cubed-bench-runtime-'));
const driver = new NsDriver({ dataDir, nodeTag: nodeTag(`bench-runtime-${process.pid}`) });
const rows: [string, string][] = [];
const fmt = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return `p50 ${percentile(s, 50).toFixed(1)} ms, p99 ${percentile(s, 99).toFixed(1)} ms (n=${s.length})`;
};
const timed = async <T>(f: () => Promise<T>): Promise<[T, number]> => {
  const t0 = performance.now();
  const r = await f();
  return [r, performance.now() - t0];
};
const memAvailableKiB = () => Number(/MemAvailable:\s+(\d+)/.exec(readFileSync('/proc/meminfo', 'utf8'))![1]);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

try {
  await driver.init();
  const template = await new TemplateStore(dataDir).resolve('host');
  const spec = (): LaunchSpec => ({ sandboxID: newSandboxID(), template, cpus: 1, memoryMiB: 256, pidsMax: 128, env: {} });
  for (let i = 0; i < 5; i++) await driver.destroy((await driver.create(spec())).sandboxID); // warm-up

  const creates: number[] = [];
  const destroys: number[] = [];
  for (let i = 0; i < n('serial'); i++) {
    const [h, c] = await timed(() => driver.create(spec()));
    creates.push(c);
    destroys.push((await timed(() => driver.destroy(h.sandboxID)))[1]);
  }
  rows.push(['serial create', fmt(creates)], ['serial destroy', fmt(destroys)]);

  const each: number[] = [];
  const walls: number[] = [];
  for (let r = 0; r < n('rounds'); r++) {
    const [hs, wall] = await timed(() =>
      Promise.all(
        Array.from({ length: n('concurrent') }, async () => {
          const [h, c] = await timed(() => driver.create(spec()));
          each.push(c);
          return h;
        }),
      ),
    );
    walls.push(wall);
    await Promise.all(hs.map((h) => driver.destroy(h.sandboxID)));
  }
  rows.push([`${n('concurrent')} concurrent creates: each`, fmt(each)], [`${n('concurrent')} concurrent creates: all ready`, fmt(walls)]);

  const h = await driver.create(spec());
  const pauses: number[] = [];
  const resumes: number[] = [];
  const execs: number[] = [];
  for (let i = 0; i < 50; i++) {
    pauses.push((await timed(() => driver.pause(h)))[1]);
    resumes.push((await timed(() => driver.resume(h)))[1]);
    execs.push((await timed(() => driver.exec(h, { argv: ['true'] }).exited))[1]);
  }
  await driver.destroy(h.sandboxID);
  rows.push(['pause', fmt(pauses)], ['resume', fmt(resumes)], ['exec `true` to exit', fmt(execs)]);

  await sleep(1000);
  const before = memAvailableKiB();
  const idle: SandboxHandle[] = [];
  for (let i = 0; i < n('idle'); i++) idle.push(await driver.create(spec()));
  await sleep(2000);
  const after = memAvailableKiB();
  const memcg = (await Promise.all(idle.map((x) => driver.stats(x)))).reduce((a, s) => a + s.memoryBytes, 0) / idle.length;
  await Promise.all(idle.map((x) => driver.destroy(x.sandboxID)));
  rows.push(
    [`host memory per idle sandbox (${idle.length} running)`, `${((before - after) / idle.length / 1024).toFixed(2)} MiB (MemAvailable delta / N)`],
    ['memcg usage per idle sandbox', `${(memcg / 1024).toFixed(0)} KiB`],
  );
} finally {
  await driver.cleanup(new Set());
  await driver.close({ destroy: true }); // the store's loop mount: rm would meet EBUSY
  await rm(dataDir, { recursive: true, force: true });
}

console.log('| measure | result |\n|---|---|');
for (const [k, v] of rows) console.log(`| ${k} | ${v} |`);
