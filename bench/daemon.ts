// A real cubed for benchmark scripts: test/helpers/daemon.ts's startDaemon (temp dirs, API key,
// stop() with --destroy-on-exit and a leak check) with a node id and pool CIDR outside the
// test ranges and benchmark-sized settings: a declared quota large enough for 1000 sandboxes,
// a rate limit that never throttles, a 256 MiB default spec. Needs `npm run build` first.
// On its own it keeps one daemon up for `cubectl bench` (prints the env to export; Ctrl-C stops it):
//   npx tsx bench/daemon.ts [--tap-init 32] [--cidr 10.198.0.0/16] [--cpu-prof-dir DIR] [--shipped] [--microvm]
// --microvm offers ns and microvm with the bootable template vmbase (cubectl bench --runtime microvm --template vmbase).
// --shipped runs the shipped defaults instead (capacity read from the host, the default spec,
// limits and filters of src/config/schema.ts): what a user gets, only dirs, port and CIDR differ.
import { randomBytes } from 'node:crypto';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { CubeletConfigSchema, MasterConfigSchema } from '../src/config/schema.js';
import { startDaemon, type StartDaemonOptions, type TestDaemon, type Tree } from '../test/helpers/daemon.js';
import { registerVmTemplate } from '../test/helpers/microvm.js';

/** startDaemon's test settings put back to the shipped defaults. */
export function shippedSettings(): { cubelet: Tree; master: Tree } {
  const m = MasterConfigSchema.parse({});
  const c = CubeletConfigSchema.parse({});
  return {
    cubelet: { quota: undefined, plugins: { 'io.cubelet.internal.v1.network': { tap_init_num: c.plugins['io.cubelet.internal.v1.network'].tap_init_num } } },
    master: {
      api: { rate_limit_per_sec: m.api.rate_limit_per_sec },
      scheduler: { node_max_mem_reserved_in_mb: m.scheduler.node_max_mem_reserved_in_mb, filter: { enable_filters: m.scheduler.filter.enable_filters } },
      sandbox: { default_spec: m.sandbox.default_spec },
    },
  };
}

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

/** A bench daemon offering ns and microvm, with the small bootable template `vmbase` (test/helpers/microvm.ts). */
export async function startMicrovmBenchDaemon(o: { cidr: string; tapInit: number; cubelet?: Tree }): Promise<TestDaemon> {
  const d = await startBenchDaemon({ ...o, cubelet: { runtime: ['ns', 'microvm'], ...o.cubelet } });
  try {
    await registerVmTemplate(d.dataDir, 'vmbase', join(d.dataDir, '..', 'vmbase'));
    await d.restart();
  } catch (e) {
    await d.stop();
    throw e;
  }
  return d;
}

if (import.meta.filename === resolve(process.argv[1] ?? '')) {
  const { values } = parseArgs({
    options: {
      'tap-init': { type: 'string', default: '32' },
      cidr: { type: 'string', default: '10.198.0.0/16' },
      'cpu-prof-dir': { type: 'string' },
      shipped: { type: 'boolean', default: false },
      microvm: { type: 'boolean', default: false },
    },
  });
  const prof = values['cpu-prof-dir'];
  const nodeArgs = prof ? { nodeArgs: ['--cpu-prof', `--cpu-prof-dir=${prof}`] } : {};
  const d = values.shipped
    ? await startDaemon({ nodeID: `bench-${process.pid}-${randomBytes(3).toString('hex')}`, cidr: values.cidr!, ...shippedSettings(), ...nodeArgs })
    : values.microvm
      ? await startMicrovmBenchDaemon({ cidr: values.cidr!, tapInit: Number(values['tap-init']) })
      : await startBenchDaemon({ cidr: values.cidr!, tapInit: Number(values['tap-init']), ...nodeArgs });
  console.log(`export CUBE_API_URL=${d.url} CUBE_API_KEY=${d.apiKey}   # cubed pid ${d.pid}, tag ${d.tag}`);
  let stopping = false;
  const stop = () => {
    if (stopping) return;
    stopping = true;
    void d.stop().then(
      () => process.exit(0),
      (e: unknown) => (console.error(e), process.exit(1)),
    );
  };
  process.on('SIGINT', stop);
  process.on('SIGTERM', stop);
}
