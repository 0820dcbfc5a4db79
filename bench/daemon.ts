// A real cubed for benchmark scripts: test/helpers/daemon.ts's startDaemon (temp dirs, API key,
// stop() with --destroy-on-exit and a leak check) with a node id and pool CIDR outside the
// test ranges and benchmark-sized settings: a declared quota large enough for 1000 sandboxes,
// a rate limit that never throttles, a 256 MiB default spec. Needs `npm run build` first.
// On its own it keeps one daemon up for `cubectl bench` (prints the env to export; Ctrl-C stops it):
//   npx tsx bench/daemon.ts [--tap-init 32] [--cidr 10.198.0.0/16] [--cpu-prof-dir DIR]
import { randomBytes } from 'node:crypto';
import { resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { startDaemon, type StartDaemonOptions, type TestDaemon, type Tree } from '../test/helpers/daemon.js';

export function startBenchDaemon(o: { cidr: string; tapInit: number; cubelet?: Tree; master?: Tree; nodeArgs?: string[] }): Promise<TestDaemon> {
  const opts: StartDaemonOptions = {
    nodeID: `bench-${process.pid}-${randomBytes(3).toString('hex')}`,
    cidr: o.cidr,
    cubelet: { quota: { cpus: 1024, memory_mib: 4_194_304 }, plugins: { 'io.cubelet.internal.v1.network': { tap_init_num: o.tapInit } }, ...o.cubelet },
    master: { api: { rate_limit_per_sec: 1_000_000 }, ...o.master },
    ...(o.nodeArgs ? { nodeArgs: o.nodeArgs } : {}),
  };
  return startDaemon(opts);
}

if (import.meta.filename === resolve(process.argv[1] ?? '')) {
  const { values } = parseArgs({
    options: { 'tap-init': { type: 'string', default: '32' }, cidr: { type: 'string', default: '10.198.0.0/16' }, 'cpu-prof-dir': { type: 'string' } },
  });
  const prof = values['cpu-prof-dir'];
  const d = await startBenchDaemon({ cidr: values.cidr!, tapInit: Number(values['tap-init']), ...(prof ? { nodeArgs: ['--cpu-prof', `--cpu-prof-dir=${prof}`] } : {}) });
  console.log(`export CUBE_API_URL=${d.url} CUBE_API_KEY=${d.apiKey}   # cubed pid ${d.pid}, tag ${d.tag}`);
  let stopping = false;
  const stop = () => {
    if (stopping) return;
    stopping = true;
    void d.stop().then(() => process.exit(0), (e: unknown) => (console.error(e), process.exit(1)));
  };
  process.on('SIGINT', stop);
  process.on('SIGTERM', stop);
}
