// The microvm runtime's figures (docs/benchmarks.md), through a cubed this script starts with
// runtime = ["ns", "microvm"] and the small bootable test template (test/helpers/microvm.ts):
// - the first create of the shape (template image + a cold boot saved as the memory snapshot);
// - create from the snapshot and destroy, p50/p99 at c=1 and c=5 (E2B API, as cubectl bench);
// - the ns runtime's create at c=1 in the same window, as the baseline of the ratio;
// - exec `true` p50 (envd process.Process/Start, as the SDK's commands.run);
// - host memory per idle VM at --idle VMs: the QEMU processes' PSS and the MemAvailable delta;
// - pause and resume of both kinds (admin API: QMP stop/cont, and memory released to a file).
// Run as root after `npm run build`: npx tsx bench/microvm.ts [--count 20] [--idle 10]
import { readdirSync, readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { E2bHttp, type CreatedSandbox } from '../src/bench/e2b-http.js';
import { summarizeLatencies } from '../src/bench/stats.js';
import { call } from '../test/helpers/daemon.js';
import { startMicrovmBenchDaemon } from './daemon.js';

const { values } = parseArgs({ options: { count: { type: 'string', default: '20' }, idle: { type: 'string', default: '10' }, cidr: { type: 'string', default: '10.195.0.0/16' } } });
const COUNT = Number(values.count);
const IDLE = Number(values.idle);
const SETTLE_MS = 10_000;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const memAvailableMiB = () => Number(/MemAvailable:\s+(\d+)/.exec(readFileSync('/proc/meminfo', 'utf8'))![1]) / 1024;
const loadavg = () => readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ');

/** PSS of every QEMU of this daemon's microVMs, MiB. */
function qemuPssMiB(ids: Set<string>): number {
  let kib = 0;
  for (const p of readdirSync('/proc').filter((x) => /^\d+$/.test(x))) {
    try {
      const name = /\0cube-([0-9a-z]+),process=cube-vm\0/.exec(readFileSync(`/proc/${p}/cmdline`, 'utf8'))?.[1];
      if (name && ids.has(name)) kib += Number(/^Pss:\s+(\d+)/m.exec(readFileSync(`/proc/${p}/smaps_rollup`, 'utf8'))![1]);
    } catch {
      // gone meanwhile
    }
  }
  return kib / 1024;
}

async function timed<T>(f: () => Promise<T>): Promise<[T, number]> {
  const t0 = performance.now();
  const v = await f();
  return [v, performance.now() - t0];
}

/** Runs f over n items with at most c in flight. */
async function pool(n: number, c: number, f: (i: number) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(Array.from({ length: c }, async () => {
    while (next < n) await f(next++);
  }));
}

const fmt = (xs: number[]) => {
  const s = summarizeLatencies(xs);
  return `p50 ${Math.round(s.p50)} ms, p99 ${Math.round(s.p99)} ms (n=${xs.length})`;
};

const d = await startMicrovmBenchDaemon({ cidr: values.cidr!, tapInit: 16 });
try {
  const http = new E2bHttp({ apiUrl: d.url, apiKey: d.apiKey, timeoutMs: 600_000 });
  const body = (runtime: string) => ({ templateID: runtime === 'ns' ? 'base' : 'vmbase', timeout: 3600, metadata: { 'cube.runtime': runtime } });
  console.log(`load before: ${loadavg()}`);

  const [first, firstMs] = await timed(() => http.create(body('microvm')));
  console.log(`first create of the shape (image + cold boot + snapshot): ${Math.round(firstMs)} ms`);
  await http.kill(first.sandboxID);

  const cycle = async (runtime: string, c: number) => {
    const creates: number[] = [];
    const destroys: number[] = [];
    await pool(COUNT, c, async () => {
      const [sb, ms] = await timed(() => http.create(body(runtime)));
      creates.push(ms);
      destroys.push((await timed(() => http.kill(sb.sandboxID)))[1]);
    });
    return { creates, destroys };
  };
  const ns1 = await cycle('ns', 1);
  console.log(`ns create c=1 (baseline): ${fmt(ns1.creates)}; destroy ${fmt(ns1.destroys)}; load ${loadavg()}`);
  const vm1 = await cycle('microvm', 1);
  console.log(`microvm create from snapshot c=1: ${fmt(vm1.creates)}; destroy ${fmt(vm1.destroys)}; load ${loadavg()}`);
  const vm5 = await cycle('microvm', 5);
  console.log(`microvm create from snapshot c=5: ${fmt(vm5.creates)}; destroy ${fmt(vm5.destroys)}; load ${loadavg()}`);
  const p50 = (xs: number[]) => summarizeLatencies(xs).p50;
  console.log(`ratio microvm/ns create p50 at c=1: ${(p50(vm1.creates) / p50(ns1.creates)).toFixed(1)}`);

  const one = await http.create(body('microvm'));
  const execs: number[] = [];
  for (let i = 0; i < COUNT; i++) execs.push((await timed(() => http.run(one, 'true')))[1]);
  console.log(`exec true: ${fmt(execs)}`);

  const kinds: [string, Record<string, unknown>][] = [['plain (QMP stop)', {}], ['releasing (memory to a file)', { release: true }]];
  for (const [kind, opts] of kinds) {
    const pauses: number[] = [];
    const resumes: number[] = [];
    for (let i = 0; i < Math.min(COUNT, 5); i++) {
      const [p, pm] = await timed(() => call(d, 'POST', `/admin/v1/sandboxes/${one.sandboxID}/pause`, opts));
      if (p.status !== 200) throw new Error(`pause: ${p.status} ${JSON.stringify(p.json)}`);
      const [r, rm] = await timed(() => call(d, 'POST', `/admin/v1/sandboxes/${one.sandboxID}/resume`));
      if (r.status !== 200) throw new Error(`resume: ${r.status} ${JSON.stringify(r.json)}`);
      pauses.push(pm);
      resumes.push(rm);
    }
    if ((await http.run(one, 'true')) !== 0) throw new Error('exec after resume failed');
    console.log(`pause ${kind}: ${fmt(pauses)}; resume ${fmt(resumes)}`);
  }
  const resumedPss = qemuPssMiB(new Set([one.sandboxID]));
  console.log(`PSS of that VM after a releasing pause and resume: ${resumedPss.toFixed(1)} MiB`);
  await http.kill(one.sandboxID);

  await sleep(SETTLE_MS);
  const before = memAvailableMiB();
  const idle: CreatedSandbox[] = [];
  await pool(IDLE, 5, async () => void idle.push(await http.create(body('microvm'))));
  await sleep(SETTLE_MS);
  const ids = new Set(idle.map((s) => s.sandboxID));
  const pss = qemuPssMiB(ids);
  const delta = before - memAvailableMiB();
  console.log(`${IDLE} idle microVMs: PSS ${(pss / IDLE).toFixed(1)} MiB/VM (QEMU processes), MemAvailable delta ${(delta / IDLE).toFixed(1)} MiB/VM; load ${loadavg()}`);
  await pool(idle.length, 5, async (i) => http.kill(idle[i]!.sandboxID));
} finally {
  await d.stop();
}
