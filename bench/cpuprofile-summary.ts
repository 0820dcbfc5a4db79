// Self and inclusive time per function and per file of the V8 CPU profiles a `bench/cluster-sim.ts
// --cpu-prof DIR` run wrote, cut to one phase of the run (its windows.json: "creates" by default,
// or "no sandboxes" for the heartbeats alone), one section per process (control, compute).
//   npx tsx bench/cpuprofile-summary.ts DIR [--phase creates] [--top 30]
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import type { Profile, ProfileNode } from './cpuprofile.js';

const { values, positionals } = parseArgs({
  allowPositionals: true,
  options: { phase: { type: 'string', default: 'creates' }, top: { type: 'string', default: '30' } },
});
const dir = positionals[0];
if (!dir) throw new Error('usage: npx tsx bench/cpuprofile-summary.ts DIR [--phase creates] [--top 30]');
const meta = JSON.parse(readFileSync(join(dir, 'windows.json'), 'utf8')) as { control: number; compute: number; windows: Record<string, [number, number]> };
const win = meta.windows[values.phase];
if (!win) throw new Error(`no phase ${values.phase} in windows.json (phases: ${Object.keys(meta.windows).join(', ')})`);
const top = Number(values.top);

const where = (n: ProfileNode) => {
  const url = n.callFrame.url
    .replace(/^file:\/\//, '')
    .replace(/^.*\/node_modules\//, 'node_modules/')
    .replace(/^.*?\/(src|bench|test)\//, '$1/');
  return { fn: `${n.callFrame.functionName || '(anonymous)'} ${url || '(native)'}:${n.callFrame.lineNumber + 1}`, file: url || '(native)' };
};

function summarise(name: string, file: string): void {
  const p = JSON.parse(readFileSync(join(dir!, file), 'utf8')) as Profile;
  const byId = new Map(p.nodes.map((n) => [n.id, n]));
  const parent = new Map<number, number>();
  for (const n of p.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  // Sample i was taken at startTime + the deltas up to i; only those inside the phase count.
  const self = new Map<number, number>();
  let at = p.startTime;
  for (let i = 0; i < p.samples.length; i++) {
    at += p.timeDeltas[i] ?? 0;
    if (at >= win![0] && at <= win![1]) self.set(p.samples[i]!, (self.get(p.samples[i]!) ?? 0) + (p.timeDeltas[i] ?? 0));
  }
  const idle = new Set(['(idle)', '(program)']);
  const busy = [...self].filter(([id]) => !idle.has(byId.get(id)!.callFrame.functionName)).reduce((s, [, t]) => s + t, 0);
  const fns = new Map<string, number>();
  const files = new Map<string, number>();
  const inclusive = new Map<string, number>();
  for (const [id, t] of self) {
    if (idle.has(byId.get(id)!.callFrame.functionName)) continue;
    const w = where(byId.get(id)!);
    fns.set(w.fn, (fns.get(w.fn) ?? 0) + t);
    files.set(w.file, (files.get(w.file) ?? 0) + t);
    const seen = new Set<string>();
    for (let cur: number | undefined = id; cur !== undefined; cur = parent.get(cur)) {
      const f = where(byId.get(cur)!).fn;
      if (!seen.has(f)) inclusive.set(f, (inclusive.get(f) ?? 0) + t);
      seen.add(f);
    }
  }
  console.log(`\n# ${name} (${file}): ${(busy / 1000).toFixed(0)} ms busy in ${((win![1] - win![0]) / 1e6).toFixed(1)} s of phase '${values.phase}'`);
  for (const [title, m] of [
    ['self time by function', fns],
    ['self time by file', files],
    ['inclusive time by function', inclusive],
  ] as const) {
    console.log(`## ${title}`);
    for (const [k, t] of [...m]
      .filter(([k]) => !k.startsWith('(root)'))
      .sort((a, b) => b[1] - a[1])
      .slice(0, top))
      console.log(`${((100 * t) / busy).toFixed(1).padStart(5)}% ${(t / 1000).toFixed(0).padStart(6)} ms  ${k}`);
  }
}

// Each process writes one profile per thread (CPU.<date>.<time>.<pid>.<thread>.<seq>.cpuprofile): thread 0 is the main one.
for (const [name, pid] of [
  ['control', meta.control],
  ['simulated nodes', meta.compute],
] as const) {
  const f = readdirSync(dir).find((x) => x.endsWith('.cpuprofile') && x.split('.')[3] === String(pid) && x.split('.')[4] === '0');
  if (f) summarise(name, f);
  else console.log(`\n# ${name}: no main-thread profile of pid ${pid} in ${dir}`);
}
