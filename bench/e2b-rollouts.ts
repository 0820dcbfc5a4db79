// The RL rollout loop through the real `e2b` SDK: N rollouts of Sandbox.create + one or more
// commands.run (+ optional files.write/read) + kill, C in flight, against a cubed this script
// starts (the benchmark daemon of bench/daemon.ts, or the shipped default config with --shipped)
// or an existing one (--url/--api-key). Prints rollouts/s, p50/p99 of every step and of the whole
// rollout, the CPU the daemon's process tree (cubed, its launch helper and their reaped children,
// from /proc/<pid>/stat) and this client spent per rollout, and with --launcher-probe the time
// of `cube-launch exec ... -- true` spawned directly into each sandbox (the floor a command
// through envd is compared with). Run as root after `npm run build`:
//   npx tsx bench/e2b-rollouts.ts [-n 200] [-c 20] [-w 20] [--cmd true]... [--file-bytes 4096]
//                                 [--shipped] [--launcher-probe] [--url U --api-key K] [--cpu-prof-dir D]
//                                 [--host-ids] [--budget DIR]
// --budget DIR: where one rollout's CPU goes (issue 26 item 1): cubed's V8 CPU profile, `perf
// record -a -g` and `perf stat -a` (syscalls, forks, execs) over the measured rollouts alone, into
// DIR; then `npx tsx bench/rollout-budget.ts DIR` prints the table. Machine-wide counts: run it
// on a quiet machine.
// --host-ids: the benchmark daemon's sandboxes share the host's ids (identity.userns = false), to
// read what the per-sandbox user namespaces cost against the default.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import { Sandbox } from 'e2b';
import { summarizeLatencies } from '../src/bench/stats.js';
import { Cgroups } from '../src/runtime/ns/cgroups.js';
import { defaultLauncher } from '../src/runtime/ns/helper.js';
import { sandboxUser } from '../src/templates/store.js';
import { startDaemon } from '../test/helpers/daemon.js';
import { startBenchDaemon } from './daemon.js';
import { CLK_TCK, statFields } from './proc-stat.js';

const { values } = parseArgs({
  options: {
    count: { type: 'string', short: 'n', default: '200' },
    concurrency: { type: 'string', short: 'c', default: '20' },
    warmup: { type: 'string', short: 'w', default: '20' },
    cmd: { type: 'string', multiple: true },
    'file-bytes': { type: 'string', default: '0' },
    shipped: { type: 'boolean', default: false },
    'launcher-probe': { type: 'boolean', default: false },
    url: { type: 'string' },
    'api-key': { type: 'string' },
    cidr: { type: 'string', default: '10.194.0.0/16' },
    'cpu-prof-dir': { type: 'string' },
    'host-ids': { type: 'boolean', default: false },
    budget: { type: 'string' },
  },
});
const count = Number(values.count);
const conc = Number(values.concurrency);
const warmup = Number(values.warmup);
const cmds = values.cmd?.length ? values.cmd : ['true'];
const fileBytes = Number(values['file-bytes']);

/** utime+stime+cutime+cstime of `root` and every live descendant, in ms (children reaped earlier are in their parent's c-times), and of `root` alone (utime+stime). */
function treeCpuMs(root: number): { tree: number; own: number } {
  const stats = new Map<number, { ppid: number; ticks: number; own: number }>();
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const f = statFields(name);
      stats.set(Number(name), { ppid: Number(f[1]), ticks: Number(f[11]) + Number(f[12]) + Number(f[13]) + Number(f[14]), own: Number(f[11]) + Number(f[12]) });
    } catch {
      // gone meanwhile
    }
  }
  const inTree = (pid: number): boolean => {
    for (let p = pid, hops = 0; p > 1 && hops < 64; p = stats.get(p)?.ppid ?? 0, hops++) if (p === root) return true;
    return false;
  };
  let ticks = 0;
  for (const [pid, s] of stats) if (inTree(pid)) ticks += s.ticks;
  return { tree: (ticks * 1000) / CLK_TCK, own: ((stats.get(root)?.own ?? 0) * 1000) / CLK_TCK };
}

/** Busy CPU of the whole machine so far (every core, /proc/stat: all but idle and iowait), in ms. */
function machineBusyMs(): number {
  const f = readFileSync('/proc/stat', 'utf8').split('\n', 1)[0]!.trim().split(/\s+/).slice(1, 9).map(Number);
  return ((f.reduce((a, b) => a + b, 0) - f[3]! - f[4]!) * 1000) / CLK_TCK;
}

/** The host pid of a sandbox's init (comm cube-init, in the sandbox's cgroup). */
function initPidOf(sandboxID: string): number {
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      if (readFileSync(`/proc/${name}/comm`, 'utf8') === 'cube-init\n' && readFileSync(`/proc/${name}/cgroup`, 'utf8').includes(`/${sandboxID}\n`))
        return Number(name);
    } catch {
      // gone meanwhile
    }
  }
  throw new Error(`no init process found for ${sandboxID}`);
}

/** `cube-launch exec` of `true` spawned straight into the sandbox as its default user (what the ns driver's exec costs at the least). */
function launcherExec(tag: string, sandboxID: string): Promise<number> {
  const u = sandboxUser('user');
  const args = ['exec', '-p', String(initPidOf(sandboxID)), '-u', String(u.uid), '-g', String(u.gid), '-d', u.home];
  for (const f of new Cgroups(tag).procsFiles(sandboxID)) args.push('-c', f);
  const t0 = performance.now();
  const child = spawn(defaultLauncher(), [...args, '--', 'true'], { stdio: 'ignore' });
  return new Promise((resolve, reject) => {
    child.once('error', reject);
    child.once('exit', (code) => (code === 0 ? resolve(performance.now() - t0) : reject(new Error(`cube-launch exec exited ${code}`))));
  });
}

const monotonicMicros = (): number => Number(process.hrtime.bigint() / 1000n);

/** perf over the measured window: call graphs of every CPU, and the machine's syscalls, forks and execs. */
function startRecorders(dir: string): ChildProcess[] {
  const events = ['raw_syscalls:sys_enter', 'sched:sched_process_fork', 'sched:sched_process_exec'].flatMap((e) => ['-e', e]);
  return [
    spawn('perf', ['record', '-q', '-a', '-g', '-o', join(dir, 'perf.data')], { stdio: 'ignore' }),
    spawn('perf', ['stat', '-a', '-x', ',', '-o', join(dir, 'perf-stat.csv'), ...events], { stdio: 'ignore' }),
  ];
}

async function stopRecorders(ps: ChildProcess[]): Promise<void> {
  await Promise.all(ps.map((p) => new Promise<void>((done) => (p.exitCode !== null ? done() : (p.once('exit', () => done()), p.kill('SIGINT'))))));
}

const own = values.url === undefined;
const budget = values.budget;
if (budget) mkdirSync(budget, { recursive: true });
const prof = budget ?? values['cpu-prof-dir'];
const nodeArgs = prof ? ['--cpu-prof', `--cpu-prof-dir=${prof}`] : undefined;
const d = !own
  ? undefined
  : values.shipped
    ? await startDaemon({ shipped: true, nodeID: `bench-${process.pid}`, cidr: values.cidr!, ...(nodeArgs ? { nodeArgs } : {}) })
    : await startBenchDaemon({
        cidr: values.cidr!,
        tapInit: 32,
        ...(nodeArgs ? { nodeArgs } : {}),
        ...(values['host-ids'] ? { cubelet: { identity: { userns: false } } } : {}),
      });
const url = d?.url ?? values.url!;
const opts = { apiKey: d?.apiKey ?? values['api-key'] ?? process.env.E2B_API_KEY, apiUrl: url, sandboxUrl: url };
const payload = 'x'.repeat(fileBytes);

type Steps = Record<string, number>;
async function rollout(): Promise<Steps> {
  const steps: Steps = {};
  let t = performance.now();
  const lap = (name: string): void => {
    const now = performance.now();
    steps[name] = now - t;
    t = now;
  };
  const t0 = t;
  const sbx = await Sandbox.create(opts);
  lap('create');
  try {
    if (values['launcher-probe'] && d) {
      steps['launcher exec'] = await launcherExec(d.tag, sbx.sandboxId);
      t = performance.now();
    }
    for (const [i, c] of cmds.entries()) {
      const r = await sbx.commands.run(c);
      if (r.exitCode !== 0) throw new Error(`commands.run(${JSON.stringify(c)}) exited ${r.exitCode}`);
      lap(cmds.length > 1 ? `run ${i + 1}` : 'run');
    }
    if (fileBytes > 0) {
      await sbx.files.write('/tmp/rollout.txt', payload);
      lap('write');
      const back = await sbx.files.read('/tmp/rollout.txt');
      if (back.length !== fileBytes) throw new Error(`read back ${back.length} bytes, wrote ${fileBytes}`);
      lap('read');
    }
  } finally {
    await sbx.kill();
    lap('kill');
  }
  steps.rollout = performance.now() - t0 - (steps['launcher exec'] ?? 0);
  return steps;
}

async function runPool(n: number, onDone: (s: Steps) => void, onError: (e: unknown) => void): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(conc, n) }, async () => {
      while (next < n) {
        next++;
        await rollout().then(onDone, onError);
      }
    }),
  );
}

try {
  const errors = new Map<string, number>();
  const noteError = (e: unknown): void => {
    const key = `${(e as Error).name}: ${(e as Error).message}`.slice(0, 160);
    errors.set(key, (errors.get(key) ?? 0) + 1);
  };
  await runPool(warmup, () => {}, noteError);
  errors.clear();
  const samples: Record<string, number[]> = {};
  const cpu0 = d ? treeCpuMs(d.pid) : { tree: 0, own: 0 };
  const machine0 = machineBusyMs();
  const client0 = process.cpuUsage();
  const recorders = budget ? startRecorders(budget) : [];
  const window0 = monotonicMicros();
  const t0 = performance.now();
  let ok = 0;
  await runPool(
    count,
    (s) => {
      ok++;
      for (const [k, v] of Object.entries(s)) (samples[k] ??= []).push(v);
    },
    noteError,
  );
  const secs = (performance.now() - t0) / 1000;
  const window1 = monotonicMicros();
  const client = process.cpuUsage(client0);
  const cpu1 = d ? treeCpuMs(d.pid) : { tree: NaN, own: NaN };
  const machine = machineBusyMs() - machine0;
  await stopRecorders(recorders);
  const load = readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ');
  const config = !own ? url : values.shipped ? 'shipped default config' : 'benchmark daemon (bench/daemon.ts)';
  console.log(
    `e2b rollouts: ${ok}/${count} ok, c=${conc}, commands ${JSON.stringify(cmds)}${fileBytes ? `, file ${fileBytes} B` : ''}, ${config} (load ${load})`,
  );
  console.log(`  ${(ok / secs).toFixed(1)} rollouts/s over ${secs.toFixed(1)} s`);
  for (const [k, xs] of Object.entries(samples)) {
    const s = summarizeLatencies(xs);
    console.log(`  ${k.padEnd(14)} p50 ${s.p50.toFixed(1).padStart(7)} ms  p99 ${s.p99.toFixed(1).padStart(7)} ms`);
  }
  const per = (ms: number): string => (ok ? `${(ms / ok).toFixed(2)} ms` : '-');
  const daemon = d
    ? `daemon tree ${per(cpu1.tree - cpu0.tree)} (cubed itself ${per(cpu1.own - cpu0.own)}, its helpers and their children the rest)`
    : 'daemon n/a (external)';
  // The tree holds the sandboxes' inits since the helper forks them itself (a21a469); before, they
  // were reparented to host pid 1 and their CPU (mounts, teardown) was in no tree: compare the
  // machine's figure across that commit (everything on the host, this client included).
  console.log(`  CPU per rollout: ${daemon}, client ${per((client.user + client.system) / 1000)}, machine ${per(machine)}`);
  if (budget && d) {
    // The window in the clock V8's profiles use (CLOCK_MONOTONIC, µs), for bench/rollout-budget.ts.
    writeFileSync(join(budget, 'windows.json'), JSON.stringify({ control: d.pid, compute: 0, windows: { rollouts: [window0, window1] } }));
    writeFileSync(
      join(budget, 'rollouts.json'),
      JSON.stringify({
        rollouts: ok,
        seconds: secs,
        load,
        config,
        cpuMs: { tree: cpu1.tree - cpu0.tree, cubed: cpu1.own - cpu0.own, client: (client.user + client.system) / 1000, machine },
      }),
    );
  }
  for (const [k, n] of errors) console.log(`  failed x${n}: ${k}`);
} finally {
  await d?.stop();
}
