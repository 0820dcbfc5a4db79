// Where one rollout's CPU goes (issue 26 item 1), from what `bench/e2b-rollouts.ts --budget DIR`
// recorded over its measured rollouts: per process (the /proc figures), cubed per stage (its V8
// CPU profile, each sample given to the deepest frame of ours on its stack), the launch helper and
// its children per kernel entry point (`perf record -a -g`, inclusive), and the machine's
// syscalls, forks and execs per rollout (`perf stat -a`: run it on a quiet machine).
//   npx tsx bench/rollout-budget.ts DIR
import { execFileSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Profile, ProfileNode } from './cpuprofile.js';

const dir = process.argv[2];
if (!dir) throw new Error('usage: npx tsx bench/rollout-budget.ts DIR (written by bench/e2b-rollouts.ts --budget DIR)');
const win = JSON.parse(readFileSync(join(dir, 'windows.json'), 'utf8')) as { control: number; windows: { rollouts: [number, number] } };
const run = JSON.parse(readFileSync(join(dir, 'rollouts.json'), 'utf8')) as {
  rollouts: number;
  seconds: number;
  load: string;
  config: string;
  cpuMs: { tree: number; cubed: number; client: number };
};
const n = run.rollouts;
const ms = (x: number): string => (x / n).toFixed(2).padStart(7);
const pct = (x: number, of: number): string => `${((100 * x) / of).toFixed(0).padStart(3)}%`;

/** Stages of cubed, by the path of the deepest frame of ours (first match wins). */
const STAGES: [RegExp, string][] = [
  [/src\/(api\/(server|auth|rate-limit|context)|http)\.ts|src\/api\/e2b\//, 'HTTP, auth, E2B routes'],
  [/src\/api\/envd\//, 'envd protocol: exec, output streaming'],
  [/src\/(scheduler\/|control\/(admission|schedulable|cluster\/node-views))/, 'admission and placement'],
  [/src\/store\//, 'state store writes and reads'],
  [/src\/control\/(watch|deltas|lifecycle|deaths|audit)/, 'events, watch, lifecycle'],
  [/src\/control\//, 'control plane: records, locks'],
  [/src\/runtime\/ns\/helper/, 'launch helper requests'],
  [/src\/network\//, 'network slot and rules'],
  [/src\/storage\//, 'writable layer (btrfs)'],
  [/src\/(runtime|cubelet)\//, 'node agent and runtime'],
  [/src\//, 'other of ours'],
];

function cubedStages(): Map<string, number> {
  const f = readdirSync(dir!).find((x) => x.endsWith('.cpuprofile') && x.split('.')[3] === String(win.control) && x.split('.')[4] === '0');
  if (!f) throw new Error(`no main-thread CPU profile of cubed (pid ${win.control}) in ${dir}`);
  const p = JSON.parse(readFileSync(join(dir!, f), 'utf8')) as Profile;
  const byId = new Map(p.nodes.map((x) => [x.id, x]));
  const parent = new Map<number, number>();
  for (const x of p.nodes) for (const c of x.children ?? []) parent.set(c, x.id);
  const stageOf = new Map<number, string>();
  const stage = (id: number): string => {
    let s = stageOf.get(id);
    if (s) return s;
    const fn = byId.get(id)!.callFrame;
    if (fn.functionName === '(garbage collector)') s = 'garbage collection';
    else {
      for (let cur: number | undefined = id; cur !== undefined && !s; cur = parent.get(cur)) {
        const url = byId.get(cur)!.callFrame.url;
        if (url.includes('/src/') && !url.includes('node_modules')) s = STAGES.find(([re]) => re.test(url))?.[1];
      }
      s ??= 'node and libraries, no frame of ours (I/O callbacks, timers)';
    }
    stageOf.set(id, s);
    return s;
  };
  const out = new Map<string, number>();
  let at = p.startTime;
  const [from, to] = win.windows.rollouts;
  for (let i = 0; i < p.samples.length; i++) {
    at += p.timeDeltas[i] ?? 0;
    if (at < from || at > to) continue;
    const id = p.samples[i]!;
    const name = byId.get(id)!.callFrame.functionName;
    if (name === '(idle)' || name === '(program)' || name === '(root)') continue;
    const s = stage(id);
    out.set(s, (out.get(s) ?? 0) + (p.timeDeltas[i] ?? 0));
  }
  return out;
}

/** perf's report lines `  12.34%  ...  name` as [name, percent]. */
function perfReport(args: string[]): [string, number][] {
  const text = execFileSync('perf', ['report', '-i', join(dir!, 'perf.data'), '--stdio', '-g', 'none', ...args], {
    encoding: 'utf8',
    maxBuffer: 256 * 2 ** 20,
    stdio: ['ignore', 'pipe', 'ignore'],
  });
  return text.split('\n').flatMap((l) => {
    const m = /^\s+([\d.]+)%\s+(?:([\d.]+)%\s+)?(.*\S)\s*$/.exec(l);
    return m ? [[m[3]!, Number(m[1])] as [string, number]] : [];
  });
}

const HELPER_COMMS = ['cube-launch', 'cube-init', 'true'];
/** Kernel entry points of the helper's work, inclusive (nested work counts in each that holds it: they do not add up). */
const ENTRIES: [RegExp, string][] = [
  [/\] (copy_process|kernel_clone)$/, 'fork (clone, in the parent)'],
  [/\] ret_from_fork$/, 'a new process starting (child side of fork)'],
  [/\] asm_exc_page_fault$/, 'page faults (copy-on-write after fork, exec)'],
  [/\] __x64_sys_execve$/, 'exec'],
  [/\] do_exit$/, 'process exit and teardown'],
  [
    /\] (__x64_sys_mount|__x64_sys_umount|__do_sys_pivot_root|__x64_sys_open_tree|__x64_sys_mount_setattr|__x64_sys_move_mount|__x64_sys_fsmount)$/,
    'mounts (mount, umount, pivot_root)',
  ],
  [/\] (__x64_sys_unshare|__do_sys_setns)$/, 'namespaces (unshare, setns)'],
  [/\] (__cgroup1_procs_write\.isra\.0|cgroup_procs_write|__cgroup_procs_write|cgroup_attach_task|cgroup_file_write)$/, 'cgroups (attach, limits)'],
  [
    /\] (__x64_sys_openat|__do_sys_newfstatat|__x64_sys_getdents64|__x64_sys_close|__x64_sys_access|__x64_sys_read|__x64_sys_write)$/,
    'files (open, stat, read, write, close)',
  ],
];

function helperEntries(): { total: number; byEntry: Map<string, number>; user: number } {
  const comms = perfReport(['--no-children', '--sort', 'comm']);
  const total = comms.filter(([c]) => HELPER_COMMS.includes(c)).reduce((s, [, p]) => s + p, 0);
  const byEntry = new Map<string, number>();
  for (const [sym, p] of perfReport(['--children', '--comms', HELPER_COMMS.join(','), '--sort', 'sym'])) {
    const e = ENTRIES.find(([re]) => re.test(sym))?.[1];
    if (e) byEntry.set(e, Math.max(byEntry.get(e) ?? 0, p));
  }
  const user = perfReport(['--no-children', '--comms', HELPER_COMMS.join(','), '--sort', 'dso'])
    .filter(([d]) => !d.includes('kernel'))
    .reduce((s, [, p]) => s + p, 0);
  return { total, byEntry, user };
}

function counts(): Map<string, number> {
  const out = new Map<string, number>();
  for (const l of readFileSync(join(dir!, 'perf-stat.csv'), 'utf8').split('\n')) {
    const f = l.split(',');
    if (f.length > 2 && /^\d+$/.test(f[0]!)) out.set(f[2]!, Number(f[0]));
  }
  return out;
}

const c = run.cpuMs;
const helperMs = c.tree - c.cubed;
console.log(
  `# One rollout's CPU: ${n} rollouts (SDK create, commands.run('true'), kill), ${run.config}, ${(n / run.seconds).toFixed(1)}/s, load ${run.load}\n`,
);
console.log('| process | ms per rollout | share |\n|---|---:|---:|');
const all = c.tree + c.client;
for (const [name, v] of [
  ['cubed (one process: HTTP, control, node agent)', c.cubed],
  ['launch helper, sandbox inits and commands (cube-launch, cube-init, the command)', helperMs],
  ['the SDK client (this process)', c.client],
] as const)
  console.log(`| ${name} | ${ms(v)} | ${pct(v, all)} |`);

const stages = cubedStages();
const sampled = [...stages.values()].reduce((s, v) => s + v, 0);
console.log(`\n## cubed by stage (its main thread's profile, ${(sampled / 1000).toFixed(0)} ms sampled, scaled to its ${ms(c.cubed).trim()} ms per rollout)\n`);
console.log('| stage | ms per rollout | share |\n|---|---:|---:|');
for (const [s, v] of [...stages].sort((a, b) => b[1] - a[1])) console.log(`| ${s} | ${ms((c.cubed * v) / sampled)} | ${pct(v, sampled)} |`);

const h = helperEntries();
console.log(
  `\n## the launch helper and its children by kernel entry (perf, inclusive: nested work counts in each, so they do not add up; ${h.total.toFixed(1)}% of the machine's samples)\n`,
);
console.log('| where | ms per rollout | share |\n|---|---:|---:|');
for (const [e, p] of [...h.byEntry].sort((a, b) => b[1] - a[1])) console.log(`| ${e} | ${ms((helperMs * p) / h.total)} | ${pct(p, h.total)} |`);
console.log(`| user space (not the kernel) | ${ms((helperMs * h.user) / h.total)} | ${pct(h.user, h.total)} |`);

const k = counts();
console.log(`\n## counts per rollout (the whole machine, perf stat -a)\n`);
for (const [ev, name] of [
  ['raw_syscalls:sys_enter', 'syscalls'],
  ['sched:sched_process_fork', 'forks'],
  ['sched:sched_process_exec', 'execs'],
] as const)
  console.log(`- ${name}: ${((k.get(ev) ?? NaN) / n).toFixed(1)}`);
