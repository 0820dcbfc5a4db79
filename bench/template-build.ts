// A 3-step template build (setEnvs + runCmd writing --mib MiB + copy of a 100-file context) with the
// real e2b SDK's Template.build against a real cubed, over an imported busybox image: cold (a new
// marker in the RUN step makes every step new), then cached (the same template again), then forced
// (skipCache), --rounds times, alternating, in one window. Prints each round and the medians.
// Needs `npm run build` first.
//   npx tsx bench/template-build.ts [--rounds 3] [--mib 20] [--cidr 10.193.0.0/16]
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createReadStream } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { Template } from 'e2b';
import { CubeClient } from '../src/cli/client.js';
import { busyboxLayer, dockerArchive, tarOf } from '../test/helpers/images.js';
import { TEST_HOST_ID_RANGES, testHostIdBase } from '../test/helpers/kernel.js';
import { startBenchDaemon } from './daemon.js';

const { values } = parseArgs({
  options: { rounds: { type: 'string', default: '3' }, mib: { type: 'string', default: '20' }, cidr: { type: 'string', default: '10.193.0.0/16' } },
});
const rounds = Number(values.rounds);
const mib = Number(values.mib);
// Each step's sandbox gets the default spec: its disk (the writable layer's quota) must hold what the RUN step writes.
// Host ids apart from the default range, which another daemon on a shared host may hold.
const d = await startBenchDaemon({
  cidr: values.cidr!,
  tapInit: 4,
  cubelet: { identity: { host_id_base: testHostIdBase(), host_id_ranges: TEST_HOST_ID_RANGES } },
  master: { sandbox: { default_spec: { cpus: 1, memory_mib: 256, disk_gib: Math.ceil(mib / 1024) + 1 } } },
});
// Made once the daemon is up: a daemon that fails to start leaves no scratch dir behind.
const scratch = await mkdtemp(join(tmpdir(), 'cube-bench-build-'));
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
try {
  await writeFile(join(scratch, 'image.tar'), await dockerArchive([await tarOf(busyboxLayer())], { Env: ['PATH=/bin:/usr/bin'] }));
  await new CubeClient({ baseUrl: d.url, apiKey: d.apiKey }).importTemplate('busybox', createReadStream(join(scratch, 'image.tar')));
  await mkdir(join(scratch, 'ctx'));
  for (let i = 0; i < 100; i++) await writeFile(join(scratch, 'ctx', `f${i}.txt`), `file ${i}\n`.repeat(100));
  const opts = { apiKey: d.apiKey, apiUrl: d.url, sandboxUrl: d.url };
  const recipe = (marker: string) =>
    Template({ fileContextPath: scratch })
      .fromImage('busybox')
      .setEnvs({ MARKER: marker })
      .runCmd(`head -c ${mib * 1048576} /dev/urandom > /home/user/blob && echo ${marker} > /home/user/marker`)
      .copy('ctx', '/opt/ctx/');
  const time = async (t: ReturnType<typeof recipe>, o: { skipCache?: boolean } = {}) => {
    const t0 = performance.now();
    await Template.build(t, 'bench-build', { ...opts, ...o });
    return Math.round(performance.now() - t0);
  };
  const runs: { cold: number; cached: number; forced: number; load: string }[] = [];
  for (let r = 0; r < rounds; r++) {
    const load = loadavg()[0]!.toFixed(1);
    const t = recipe(`round-${r}-${Date.now()}`);
    const cold = await time(t);
    const cached = await time(t);
    const forced = await time(t, { skipCache: true });
    runs.push({ cold, cached, forced, load });
    console.log(JSON.stringify({ round: r + 1, coldMs: cold, cachedMs: cached, forcedMs: forced, load1: load }));
  }
  const cold = median(runs.map((x) => x.cold));
  const cached = median(runs.map((x) => x.cached));
  console.log(
    JSON.stringify({
      steps: 3,
      runMiB: mib,
      copyFiles: 100,
      medianColdMs: cold,
      medianCachedMs: cached,
      medianForcedMs: median(runs.map((x) => x.forced)),
      cachedOverCold: +(cached / cold).toFixed(3),
      load1: loadavg()[0]!.toFixed(1),
    }),
  );
} finally {
  await d.stop();
  await rm(scratch, { recursive: true, force: true });
}
