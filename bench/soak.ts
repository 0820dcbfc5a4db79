// Leak soak (issue 6 part 3): N create-delete cycles at concurrency C through the E2B API of a
// cubed this script starts itself; the kernel objects of its node tag (netns, veth links,
// cgroups, mounts, cube-init processes, nftables tables), cubed's open fds and RSS are counted
// before and after. PASS: every count back at its baseline, RSS growth < 50 MiB, no failed cycle.
// cubed's JS heap in use (from its /metrics) is printed beside RSS, to tell V8 growth from native memory.
// Run as root after `npm run build`:
//   npx tsx bench/soak.ts [--cycles 10000] [--concurrency 20] [--tap-init 32] [--cidr 10.197.0.0/16]
import { existsSync, readdirSync, readFileSync, readlinkSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { parseArgs } from 'node:util';
import { E2bHttp } from '../src/bench/e2b-http.js';
import { runBench } from '../src/bench/runner.js';
import { countKernelObjects, type KernelObjects } from '../test/helpers/kernel.js';
import { startBenchDaemon } from './daemon.js';

const { values } = parseArgs({
  options: {
    cycles: { type: 'string', default: '10000' },
    concurrency: { type: 'string', default: '20' },
    'tap-init': { type: 'string', default: '32' },
    cidr: { type: 'string', default: '10.197.0.0/16' },
  },
});
const cycles = Number(values.cycles);
const concurrency = Number(values.concurrency);
const RSS_LIMIT_MIB = 50;
/**
 * Quiet time before counting: longer than undici's 4 s keep-alive (the client's idle connections
 * are closed) and than the network pool's 5 s idle trim back to tap_init_num.
 */
const QUIET_MS = 8_000;

interface Counts extends KernelObjects {
  fds: number;
  rssMiB: number;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * Socket inodes of established connections to `port` (the API): the client's keep-alive pool,
 * which the server holds open for 65 s; they are this script's, not cubed's, so not counted.
 */
function apiConnections(port: number): Set<string> {
  const out = new Set<string>();
  for (const f of ['/proc/net/tcp', '/proc/net/tcp6']) {
    for (const line of readFileSync(f, 'utf8').split('\n').slice(1)) {
      const c = line.trim().split(/\s+/);
      if (c.length > 9 && parseInt(c[1]!.split(':')[1]!, 16) === port && c[3] === '01') out.add(c[9]!);
    }
  }
  return out;
}

function processFacts(pid: number, port: number): { fds: number; rssMiB: number } {
  const rssKiB = Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? NaN);
  return { fds: [...fdKinds(pid, port).values()].reduce((a, b) => a + b, 0), rssMiB: rssKiB / 1024 };
}

/** cubed's open fds (but the API connections of this script) by kind (socket, pipe, anon_inode:inotify, a path's directory), to name a leak. */
function fdKinds(pid: number, port: number): Map<string, number> {
  const out = new Map<string, number>();
  const clients = apiConnections(port);
  for (const fd of readdirSync(`/proc/${pid}/fd`)) {
    let target = '?';
    try {
      target = readlinkSync(`/proc/${pid}/fd/${fd}`);
    } catch {
      continue;
    }
    if (clients.has(/^socket:\[(\d+)\]$/.exec(target)?.[1] ?? '')) continue;
    const kind = target.startsWith('/') ? target.replace(/\/[^/]*$/, '/') : target.replace(/\[.*\]$/, '').replace(/:$/, '');
    out.set(kind, (out.get(kind) ?? 0) + 1);
  }
  return out;
}

/** cubed's V8 heap in use, MiB, from its own /metrics (loopback callers need no key). */
async function heapUsedMiB(url: string): Promise<number> {
  const text = await (await fetch(`${url}/metrics`)).text();
  return Number(/^cubed_nodejs_heap_size_used_bytes (\S+)$/m.exec(text)?.[1] ?? NaN) / 1024 / 1024;
}

async function counts(tag: string, pid: number, port: number): Promise<Counts> {
  return { ...(await countKernelObjects(tag)), ...processFacts(pid, port) };
}

const d = await startBenchDaemon({ cidr: values.cidr!, tapInit: Number(values['tap-init']) });
const port = Number(new URL(d.url).port);
let ok = false;
try {
  const http = new E2bHttp({ apiUrl: d.url, apiKey: d.apiKey });
  const ops = {
    create: async () => (await http.create({ templateID: 'base', timeout: 600 })).sandboxID,
    kill: (id: string) => http.kill(id),
    exec: async () => {},
    pause: async () => {},
    resume: async () => {},
  };
  // Warm-up: the helper, JIT, pool refill and lazily opened files exist before the baseline.
  await runBench({ mode: 'create-delete', concurrency, count: concurrency * 2, warmup: 0, workload: 'burst', seed: 1 }, ops);
  await sleep(QUIET_MS);
  const before = await counts(d.tag, d.pid, port);
  const fdsBefore = fdKinds(d.pid, port);
  const heapBefore = await heapUsedMiB(d.url);
  console.log(`cubed pid ${d.pid}, tag ${d.tag}; baseline ${JSON.stringify(before)}`);
  let last = 0;
  const r = await runBench({ mode: 'create-delete', concurrency, count: cycles, warmup: 0, workload: 'burst', seed: 1 }, ops, (p) => {
    if (p.done - last >= 1000 || p.done === p.total) {
      last = p.done;
      const rss = processFacts(d.pid, port).rssMiB.toFixed(1);
      void heapUsedMiB(d.url).then((h) => console.log(`  ${p.done}/${p.total} ok ${p.ok} failed ${p.failed}  rss ${rss} MiB  js heap ${h.toFixed(1)} MiB`));
    }
  });
  await sleep(QUIET_MS);
  const after = await counts(d.tag, d.pid, port);
  const fdsAfter = fdKinds(d.pid, port);
  const s = r.summary;
  const lat = (k: string) => r.phases[k]!;
  console.log(
    `cycles ${s.count} ok ${s.success} failed ${s.failed} in ${s.durationSec.toFixed(1)} s (${s.throughputPerSec.toFixed(1)} create+delete/s); ` +
      `create p50 ${lat('create').p50.toFixed(1)} p99 ${lat('create').p99.toFixed(1)} ms, delete p50 ${lat('delete').p50.toFixed(1)} p99 ${lat('delete').p99.toFixed(1)} ms; errors ${JSON.stringify(r.errors)}`,
  );
  const rows = (Object.keys(before) as (keyof Counts)[]).map((k) => {
    const growth = after[k] - before[k];
    const pass = k === 'rssMiB' ? growth < RSS_LIMIT_MIB : growth === 0;
    return {
      k,
      pass,
      line: `  ${k.padEnd(10)} ${before[k].toFixed(k === 'rssMiB' ? 1 : 0).padStart(8)} -> ${after[k].toFixed(k === 'rssMiB' ? 1 : 0).padStart(8)}  ${pass ? 'ok' : 'LEAK'}`,
    };
  });
  console.log(rows.map((x) => x.line).join('\n'));
  console.log(
    `  js heap    ${heapBefore.toFixed(1).padStart(8)} -> ${(await heapUsedMiB(d.url)).toFixed(1).padStart(8)}  (in use, MiB; part of rssMiB, not a pass criterion)`,
  );
  for (const k of new Set([...fdsBefore.keys(), ...fdsAfter.keys()])) {
    const [b, a] = [fdsBefore.get(k) ?? 0, fdsAfter.get(k) ?? 0];
    if (a !== b) console.log(`  fds of kind ${k}: ${b} -> ${a}`);
  }
  ok = s.failed === 0 && rows.every((x) => x.pass);
} catch (e) {
  const log = join(dirname(d.dataDir), 'daemon.log');
  if (!existsSync(`/proc/${d.pid}`)) console.log(`cubed ${d.pid} died; last lines of ${log}:\n${readFileSync(log, 'utf8').split('\n').slice(-15).join('\n')}`);
  throw e;
} finally {
  // Throws, naming what is left, when the tag's kernel objects outlive --destroy-on-exit.
  await d.stop().then(
    () => console.log('after cubed --destroy-on-exit: nothing of the tag left'),
    (e: unknown) => {
      console.log(String(e));
      ok = false;
    },
  );
}
console.log(ok ? 'PASS' : 'FAIL');
process.exitCode = ok ? 0 : 1;
