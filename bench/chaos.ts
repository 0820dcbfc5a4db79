// The chaos benchmark (issue 24, design.md section 8): RL rollouts through the real `e2b` SDK
// (create with an idempotency key, run `echo ok`, kill) at 20 concurrent against 2 control
// replicas and 3 compute nodes on the bench's own Redis and MariaDB (own ports and data dirs:
// the machine's shared ones are never touched), while every ~15 s one random component (a
// replica, a node, Redis, MariaDB) is killed with -9, frozen for 20 s (SIGSTOP) or restarted.
// A quiet run first gives the rate the chaos run is compared with. Prints the counts that must be
// 0 (test/helpers/chaos.ts says what each means) and every finding. Run as root after `npm run build`:
//   npx tsx bench/chaos.ts [-n 2000] [--quiet 200] [-c 20] [--every 15] [--freeze 20] [--each]
// --each: the 12 faults (kill -9, freeze, restart of a replica, a node, Redis, MariaDB) in turn
// instead of a random one each time; the rollouts go on past -n until every one has happened.
// CUBE_KEEP_CLUSTER_LOGS=1 keeps the replicas' and nodes' logs (their dir is printed at the end).
import { loadavg } from 'node:os';
import { parseArgs } from 'node:util';
import { runChaos, type Fault } from '../test/helpers/chaos.js';

const { values } = parseArgs({
  options: {
    rollouts: { type: 'string', short: 'n', default: '2000' },
    quiet: { type: 'string', default: '200' },
    concurrency: { type: 'string', short: 'c', default: '20' },
    every: { type: 'string', default: '15' },
    freeze: { type: 'string', default: '20' },
    each: { type: 'boolean', default: false },
  },
});

// Targets and actions interleaved, so that consecutive faults hit different components.
const EACH: Fault[] = [
  { action: 'kill9', target: 'replica' },
  { action: 'freeze', target: 'node' },
  { action: 'restart', target: 'redis' },
  { action: 'kill9', target: 'mariadb' },
  { action: 'freeze', target: 'replica' },
  { action: 'kill9', target: 'node' },
  { action: 'freeze', target: 'redis' },
  { action: 'restart', target: 'mariadb' },
  { action: 'restart', target: 'replica' },
  { action: 'restart', target: 'node' },
  { action: 'kill9', target: 'redis' },
  { action: 'freeze', target: 'mariadb' },
];

const load0 = loadavg()[0]!;
const r = await runChaos({
  quiet: Number(values.quiet),
  rollouts: Number(values.rollouts),
  concurrency: Number(values.concurrency),
  faultEveryMs: Number(values.every) * 1000,
  freezeMs: Number(values.freeze) * 1000,
  ...(values.each ? { faults: EACH, faultsAtLeast: EACH.length } : {}),
  log: (l) => console.log(`[${new Date().toISOString()}] ${l}`),
});
console.log(JSON.stringify({ ...r, findings: r.findings.length, load: { start: load0, end: loadavg()[0] } }, null, 1));
for (const f of r.findings) console.log(f);
if (r.quiet) console.log(`rate during chaos / quiet: ${(r.chaos.perSec / r.quiet.perSec).toFixed(2)} (target >= 0.5)`);
