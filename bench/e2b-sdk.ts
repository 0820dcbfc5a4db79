// The E2B SDK path end to end, as RL code runs it: Sandbox.create + commands.run('true') + kill,
// one after another (c=1), against a cubed this script starts. Prints each phase's p50/p99.
// Run as root after `npm run build`: npx tsx bench/e2b-sdk.ts [--count 100] [--warmup 10]
import { readFileSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import { Sandbox } from 'e2b';
import { summarizeLatencies } from '../src/bench/stats.js';
import { startBenchDaemon } from './daemon.js';

const { values } = parseArgs({
  options: {
    count: { type: 'string', default: '100' },
    warmup: { type: 'string', default: '10' },
    cidr: { type: 'string', default: '10.195.0.0/16' },
  },
});
const count = Number(values.count);
const warmup = Number(values.warmup);

const d = await startBenchDaemon({ cidr: values.cidr!, tapInit: 32 });
try {
  const opts = { apiKey: d.apiKey, apiUrl: d.url, sandboxUrl: d.url };
  const phases: Record<string, number[]> = { create: [], run: [], kill: [], total: [] };
  for (let i = 0; i < warmup + count; i++) {
    const t0 = performance.now();
    const sbx = await Sandbox.create(opts);
    const t1 = performance.now();
    const r = await sbx.commands.run('true');
    const t2 = performance.now();
    await sbx.kill();
    const t3 = performance.now();
    if (r.exitCode !== 0) throw new Error(`commands.run('true') exited ${r.exitCode}`);
    if (i < warmup) continue;
    phases.create!.push(t1 - t0);
    phases.run!.push(t2 - t1);
    phases.kill!.push(t3 - t2);
    phases.total!.push(t3 - t0);
  }
  const load = readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ');
  console.log(`E2B SDK ${count} iterations (load ${load}):`);
  for (const [k, xs] of Object.entries(phases)) {
    const s = summarizeLatencies(xs);
    console.log(`  ${k.padEnd(7)} p50 ${s.p50.toFixed(1)} ms  p99 ${s.p99.toFixed(1)} ms`);
  }
} finally {
  await d.stop();
}
