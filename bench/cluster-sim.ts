// End-to-end scheduler benchmark through the real control plane: one control replica on Redis +
// MariaDB (a private key prefix and database) and ONE compute process standing for N SIMULATED
// nodes (--runtime sim --sim-nodes N: varied capacity, no kernel objects). Creates go through
// the E2B REST API with `concurrency` clients; reported: creates/s and API latency, the
// control's own decision latency (the scheduler pipeline over N node views, /admin/v1/stats),
// and how the placements spread. Everything it started is stopped and dropped at the end.
//   npx tsx bench/cluster-sim.ts [--nodes 1000] [--creates 3000] [--concurrency 32] [--select 3] [--heartbeat-timeout-ms 3000]
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, openSync, rmSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { stringify as toYaml } from 'yaml';
import type { NodeView, SandboxView, StatsView } from '../src/api/types.js';
import { E2bHttp } from '../src/bench/e2b-http.js';
import { runBench } from '../src/bench/runner.js';
import { clusterStateScope } from '../test/helpers/cluster-state.js';
import { freePort } from '../test/helpers/daemon.js';

const { values } = parseArgs({ options: { nodes: { type: 'string', default: '1000' }, creates: { type: 'string', default: '3000' }, concurrency: { type: 'string', default: '32' }, select: { type: 'string', default: '3' }, 'heartbeat-timeout-ms': { type: 'string', default: '3000' } } });
const N = Number(values.nodes);
const ROOT = resolve(import.meta.dirname, '..');
const TSX = join(ROOT, 'node_modules/.bin/tsx');
const DAEMON = join(ROOT, 'src/cli/daemon.ts');

const dir = mkdtempSync('/tmp/cubed-bench-sim-');
const scope = clusterStateScope();
const apiKey = `e2b_${randomBytes(20).toString('hex')}`;
const env = { ...process.env, CUBE_API_KEY: apiKey, CUBE_LOG_LEVEL: 'warn' };
// --heartbeat-timeout-ms: on a small shared machine the one process answering for every node can
// deliver a batch late under a create burst; 3000 (the default) then takes all nodes out at once.
writeFileSync(join(dir, 'cubemaster.yaml'), toYaml({ api: { rate_limit_per_sec: 100_000 }, scheduler: { priority_select_num: Number(values.select), heartbeat_timeout_ms: Number(values['heartbeat-timeout-ms']) }, sandbox: { default_spec: { cpus: 1, memory_mib: 512, disk_gib: 1 } } }));
writeFileSync(join(dir, 'cubelet.toml'), '');
const children: ChildProcess[] = [];

function start(name: string, args: string[]): ChildProcess {
  const log = openSync(join(dir, `${name}.log`), 'a');
  const c = spawn(TSX, [DAEMON, ...args, '--config-dir', dir], { env, stdio: ['ignore', log, log], detached: true });
  children.push(c);
  return c;
}

async function get<T>(url: string, path: string): Promise<T> {
  const res = await fetch(url + path, { headers: { 'x-api-key': apiKey } });
  if (!res.ok) throw new Error(`GET ${path}: ${res.status} ${await res.text()}`);
  return (await res.json()) as T;
}

async function until(what: string, probe: () => Promise<boolean>, timeoutMs: number): Promise<void> {
  for (const end = Date.now() + timeoutMs; !(await probe().catch(() => false)); ) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what} (logs in ${dir})`);
    await new Promise((r) => setTimeout(r, 500));
  }
}

const fix = (x: number | undefined, d = 3) => (x ?? Number.NaN).toFixed(d);

try {
  const [cport, nport] = [await freePort(), await freePort()];
  const control = `http://127.0.0.1:${cport}`;
  start('control', ['--role', 'control', '--redis', scope.redisURL, '--redis-prefix', scope.keyPrefix, '--mysql', scope.mysqlURL, '--listen', `127.0.0.1:${cport}`, '--node-id', 'bench-control']);
  await until('the control replica', async () => (await fetch(`${control}/health`)).ok, 60_000);
  const t0 = Date.now();
  start('compute', ['--role', 'compute', '--runtime', 'sim', '--sim-nodes', String(N), '--node-id-prefix', 'sim-', '--control', control, '--listen', `127.0.0.1:${nport}`, '--data-dir', join(dir, 'data'), '--node-id', 'bench-sim', '--destroy-on-exit']);
  await until(`${N} healthy simulated nodes`, async () => (await get<NodeView[]>(control, '/admin/v1/nodes')).filter((n) => n.healthy).length === N, 180_000);
  console.log(`nodes=${N} registered and healthy in ${((Date.now() - t0) / 1000).toFixed(1)} s (one compute process, heartbeats batched)`);

  const http = new E2bHttp({ apiUrl: control, apiKey });
  // Sandboxes stay until the spread is counted; the bench deletes them itself at the end.
  const made: string[] = [];
  let lastError = '';
  const ops = {
    create: async () => {
      try {
        return (await http.create({ templateID: 'host', timeout: 3600 })).sandboxID;
      } catch (e) {
        lastError = (e as Error).message;
        throw e;
      }
    },
    kill: async (id: string) => void made.push(id),
    exec: async () => undefined,
    pause: (id: string) => http.pause(id),
    resume: (id: string) => http.resume(id),
  };
  const r = await runBench({ mode: 'create-only', concurrency: Number(values.concurrency), count: Number(values.creates), warmup: 50, workload: 'burst', seed: 42 }, ops);
  const s = r.summary;
  const stats = await get<StatsView>(control, '/admin/v1/stats');
  console.log(`API creates: ${s.success}/${s.count} ok at concurrency ${values.concurrency}: ${fix(s.throughputPerSec, 0)} creates/s; latency ms p50=${fix(s.latencyMs.p50, 1)} p90=${fix(s.latencyMs.p90, 1)} p99=${fix(s.latencyMs.p99, 1)} max=${fix(s.latencyMs.max, 1)}`);
  if (Object.keys(r.errors).length > 0) console.log(`errors: ${JSON.stringify(r.errors)}; last: ${lastError.slice(0, 300)}`);
  console.log(`control decision (pipeline over ${N} node views, last minute, ${stats.decisionsLastMinute ?? 0} decisions): p50=${fix(stats.decisionP50Ms)} p99=${fix(stats.decisionP99Ms)} ms`);
  const sandboxes = await get<SandboxView[]>(control, '/admin/v1/sandboxes');
  const perNode = new Map<string, number>();
  for (const sb of sandboxes) perNode.set(sb.nodeID, (perNode.get(sb.nodeID) ?? 0) + 1);
  const counts = [...perNode.values()].sort((a, b) => a - b);
  console.log(`spread: ${sandboxes.length} sandboxes on ${perNode.size} of ${N} nodes (per node min ${counts[0] ?? 0}, max ${counts.at(-1) ?? 0})`);
  for (let i = 0; i < made.length; i += 64) await Promise.all(made.slice(i, i + 64).map((id) => http.kill(id).catch(() => undefined)));
  console.log(`targets: decision p99 <= 1 ms ${(stats.decisionP99Ms ?? Infinity) <= 1 ? 'MET' : 'MISSED'}; API creates/s >= 1000 ${s.throughputPerSec >= 1000 ? 'MET' : 'MISSED'}`);
} finally {
  for (const c of children.reverse()) {
    if (c.exitCode !== null || c.signalCode !== null) continue;
    const gone = new Promise((r) => c.once('exit', r));
    c.kill('SIGTERM'); // tsx passes it on; a second one to the daemon would skip the clean stop
    const k = setTimeout(() => process.kill(-c.pid!, 'SIGKILL'), 30_000);
    await gone;
    clearTimeout(k);
  }
  await scope.drop();
  rmSync(dir, { recursive: true, force: true });
}
