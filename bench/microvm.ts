// The microvm runtime's figures (docs/benchmarks.md, issue 15), through a cubed this script starts
// with runtime = ["ns", "microvm"] and the small bootable test template (test/helpers/microvm.ts).
// One command per figure (or `all`, the default), a table at the end:
//   create  create from the memory snapshot and destroy, p50/p99 at each --concurrency (E2B API,
//           as cubectl bench), the ns runtime's create at c=1 in the same window as the baseline;
//           the first create of the shape (template image + a cold boot saved as the snapshot)
//   cold    the same with microvm.snapshots = false (its own daemon): every create boots
//   volume  create at c=1 of a microVM mounting a volume (a cold boot with a virtiofsd), alternated
//           with creates without one (from the snapshot) in the same window as the baseline
//   exec    exec `true` p50 (envd process.Process/Start, as the SDK's commands.run)
//   pause   pause and resume of both kinds (admin API: QMP stop/cont, memory released to a file)
//   idle    host memory per idle VM at each --idle count: the QEMU processes' PSS and the
//           MemAvailable delta (machine-wide: other work on the host moves it)
// Run as root after `npm run build`:
//   npx tsx bench/microvm.ts [all|create|cold|volume|exec|pause|idle]... [--count 20] [--concurrency 1,5] [--idle 10,50]
//     [--host-id-base N] (beside another daemon holding the default host ids)
// Small and quick (a proof that it runs): --count 3 --concurrency 1,2 --idle 3 --settle 2
import { readdirSync, readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { E2bHttp, type CreatedSandbox } from '../src/bench/e2b-http.js';
import { summarizeLatencies } from '../src/bench/stats.js';
import { call, type TestDaemon } from '../test/helpers/daemon.js';
import { startMicrovmBenchDaemon } from './daemon.js';

const MODES = ['create', 'cold', 'volume', 'exec', 'pause', 'idle'] as const;
type Mode = (typeof MODES)[number];
const { values, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    count: { type: 'string', default: '20' },
    concurrency: { type: 'string', default: '1,5' },
    idle: { type: 'string', default: '10,50' },
    settle: { type: 'string', default: '10' },
    cidr: { type: 'string', default: '10.195.0.0/16' },
    // Another daemon on the host holds the default sandbox host ids: move this one's (identity.host_id_base).
    'host-id-base': { type: 'string' },
  },
});
const asked = positionals.length === 0 || positionals.includes('all') ? [...MODES] : positionals;
const unknown = asked.filter((m) => !(MODES as readonly string[]).includes(m));
if (unknown.length) throw new Error(`unknown mode ${unknown.join(', ')}: one or more of all, ${MODES.join(', ')}`);
const modes = new Set(asked as Mode[]);
const COUNT = Number(values.count);
const list = (s: string) =>
  s
    .split(',')
    .map(Number)
    .filter((n) => n > 0);
const CONCURRENCY = list(values.concurrency!);
const IDLE = list(values.idle!);
const SETTLE_MS = Number(values.settle) * 1000;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const memAvailableMiB = () => Number(/MemAvailable:\s+(\d+)/.exec(readFileSync('/proc/meminfo', 'utf8'))![1]) / 1024;
const loadavg = () => readFileSync('/proc/loadavg', 'utf8').split(' ')[0]!;

/** PSS of every QEMU of these microVMs, MiB. */
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
  await Promise.all(
    Array.from({ length: c }, async () => {
      while (next < n) await f(next++);
    }),
  );
}

/** The table printed at the end: one row per figure, with the load average when it was taken. */
const rows: [string, string, string][] = [];
function row(what: string, result: string): void {
  rows.push([what, result, loadavg()]);
  console.log(`${what}: ${result} (load ${loadavg()})`);
}
const ms = (xs: number[]) => {
  const s = summarizeLatencies(xs);
  return `p50 ${Math.round(s.p50)} ms, p99 ${Math.round(s.p99)} ms (n=${xs.length})`;
};

const body = (runtime: string, volume?: string) => ({
  templateID: runtime === 'ns' ? 'base' : 'vmbase',
  timeout: 3600,
  metadata: { 'cube.runtime': runtime },
  ...(volume ? { volumeMounts: [{ name: volume, path: '/data' }] } : {}),
});

/** Creates and destroys COUNT sandboxes at each concurrency; the rows name `label`. */
async function cycles(http: E2bHttp, runtime: string, label: string, concurrencies: number[]): Promise<number[]> {
  const p50s: number[] = [];
  for (const c of concurrencies) {
    const creates: number[] = [];
    const destroys: number[] = [];
    await pool(COUNT, c, async () => {
      const [sb, t] = await timed(() => http.create(body(runtime)));
      creates.push(t);
      destroys.push((await timed(() => http.kill(sb.sandboxID)))[1]);
    });
    row(`${label} create, c=${c}`, ms(creates));
    row(`${label} destroy, c=${c}`, ms(destroys));
    p50s.push(summarizeLatencies(creates).p50);
  }
  return p50s;
}

/** A daemon of its own for a group of figures, stopped (and checked for leaks) afterwards. */
async function withDaemon(cubelet: Record<string, unknown>, f: (d: TestDaemon, http: E2bHttp) => Promise<void>): Promise<void> {
  const ids = values['host-id-base'] ? { identity: { host_id_base: Number(values['host-id-base']) } } : {};
  const d = await startMicrovmBenchDaemon({ cidr: values.cidr!, tapInit: 16, cubelet: { ...cubelet, ...ids } });
  try {
    await f(d, new E2bHttp({ apiUrl: d.url, apiKey: d.apiKey, timeoutMs: 600_000 }));
  } finally {
    await d.stop();
  }
}

console.log(`modes: ${[...modes].join(', ')}; count ${COUNT}, concurrency ${CONCURRENCY.join(',')}, idle ${IDLE.join(',')}; load before: ${loadavg()}`);

if (modes.has('cold')) {
  await withDaemon({ microvm: { snapshots: false } }, async (_d, http) => {
    await cycles(http, 'microvm', 'cold boot (snapshots off)', CONCURRENCY);
  });
}

if (modes.has('create') || modes.has('volume') || modes.has('exec') || modes.has('pause') || modes.has('idle')) {
  await withDaemon({}, async (d, http) => {
    const [first, firstMs] = await timed(() => http.create(body('microvm')));
    row('first create of the shape (image + cold boot + snapshot)', `${Math.round(firstMs)} ms`);
    await http.kill(first.sandboxID);

    if (modes.has('volume')) {
      const made = await call(d, 'POST', '/volumes', { name: 'bench-vol', sizeGiB: 1 });
      if (made.status !== 201) throw new Error(`volume create: ${made.status} ${JSON.stringify(made.json)}`);
      const plain: number[] = [];
      const mounted: number[] = [];
      for (let i = 0; i < COUNT; i++) {
        for (const [volume, into] of [[undefined, plain] as const, ['bench-vol', mounted] as const]) {
          const [sb, t] = await timed(() => http.create(body('microvm', volume)));
          into.push(t);
          await http.kill(sb.sandboxID);
        }
      }
      row('create from the snapshot (no volume), c=1, alternated', ms(plain));
      row('create mounting a volume (cold boot + virtiofsd), c=1, alternated', ms(mounted));
      row('ratio with / without a volume, create p50', (summarizeLatencies(mounted).p50 / summarizeLatencies(plain).p50).toFixed(2));
      await call(d, 'DELETE', `/volumes/${made.json.volumeID as string}`);
    }

    if (modes.has('create')) {
      const [ns1] = await cycles(http, 'ns', 'ns (baseline)', [1]);
      const vm = await cycles(http, 'microvm', 'from the snapshot', CONCURRENCY);
      if (CONCURRENCY[0] === 1) row('ratio microvm / ns create p50 at c=1', (vm[0]! / ns1!).toFixed(1));
    }

    if (modes.has('exec') || modes.has('pause')) {
      const one = await http.create(body('microvm'));
      if (modes.has('exec')) {
        const execs: number[] = [];
        for (let i = 0; i < COUNT; i++) execs.push((await timed(() => http.run(one, 'true')))[1]);
        row('exec true', ms(execs));
      }
      if (modes.has('pause')) {
        const kinds: [string, Record<string, unknown>][] = [
          ['plain (QMP stop)', {}],
          ['releasing (memory to a file)', { release: true }],
        ];
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
          row(`pause, ${kind}`, ms(pauses));
          row(`resume, ${kind}`, ms(resumes));
        }
        row('PSS of that VM after a releasing pause and resume', `${qemuPssMiB(new Set([one.sandboxID])).toFixed(1)} MiB`);
      }
      await http.kill(one.sandboxID);
    }

    if (modes.has('idle')) {
      for (const n of IDLE) {
        await sleep(SETTLE_MS);
        const before = memAvailableMiB();
        const idle: CreatedSandbox[] = [];
        await pool(n, 5, async () => void idle.push(await http.create(body('microvm'))));
        await sleep(SETTLE_MS);
        const pss = qemuPssMiB(new Set(idle.map((s) => s.sandboxID)));
        const delta = before - memAvailableMiB();
        row(`${n} idle microVMs, per VM`, `PSS ${(pss / n).toFixed(1)} MiB (QEMU processes), MemAvailable delta ${(delta / n).toFixed(1)} MiB`);
        const destroys: number[] = [];
        await pool(idle.length, 5, async (i) => void destroys.push((await timed(() => http.kill(idle[i]!.sandboxID)))[1]));
        row(`destroy of the ${n} idle microVMs, c=5`, ms(destroys));
      }
    }
  });
}

const width = [0, 1, 2].map((i) => Math.max(...rows.map((r) => r[i]!.length), 6));
const line = (cells: string[]) => `| ${cells.map((c, i) => c.padEnd(width[i]!)).join(' | ')} |`;
console.log(`\n${line(['what', 'result', 'load'])}\n|${width.map((w) => '-'.repeat(w + 2)).join('|')}|`);
for (const r of rows) console.log(line(r));
