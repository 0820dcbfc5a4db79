// Warm pools (issue 26 item 3): create latency of a start-command template through the unchanged
// e2b SDK (Sandbox.create, as a trainer calls it), cold vs warm, at c=1, in one bench daemon with
// the shipped pool size (warm_pool.size 1). The template is busybox whose start command takes
// --ready-sec to be ready (the "3 s to be ready" case; the code interpreter is the same
// path with a longer start). Three runs of --n creates, each create followed by its kill:
//   cold:   warm_pool.size 0 (the baseline, same window)
//   paced:  warm_pool.size 1, the next create once the pool holds a ready sandbox again (a pace
//           the refill keeps up with: one create per start time and a little)
//   eager:  warm_pool.size 1, creates back to back: the refill cannot keep up, a create that
//           finds none ready is made cold (the hit rate says how many did)
// --code-interpreter: the code-interpreter-v1 template instead (recipes/code-interpreter/build.mjs
// --import: built once, then taken from its cache), whose start command is the kernel server.
// Needs `npm run build` first.
//   npx tsx bench/warm.ts [--n 20] [--ready-sec 3] [--code-interpreter] [--cidr 10.177.0.0/16]
import { execFile } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { loadavg, tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { parseArgs } from 'node:util';
import { Sandbox } from 'e2b';
import { CubeClient } from '../src/cli/client.js';
import type { NodeView } from '../src/model/node.js';
import { percentile } from '../src/model/stats.js';
import { busyboxLayer, dockerArchive, tarOf } from '../test/helpers/images.js';
import { startBenchDaemon } from './daemon.js';

const { values } = parseArgs({
  options: {
    n: { type: 'string', default: '20' },
    'ready-sec': { type: 'string', default: '3' },
    'code-interpreter': { type: 'boolean', default: false },
    cidr: { type: 'string', default: '10.177.0.0/16' },
  },
});
const n = Number(values.n);
const readySec = Number(values['ready-sec']);
const scratch = await mkdtemp(join(tmpdir(), 'cube-bench-warm-'));
// Host ids apart from another bench daemon's (the shipped range would overlap one running beside it).
const d = await startBenchDaemon({ cidr: values.cidr!, tapInit: 8, cubelet: { identity: { host_id_base: 600_000_000, host_id_ranges: 64 } } });
const client = new CubeClient({ baseUrl: d.url, apiKey: d.apiKey });
const opts = { apiKey: d.apiKey, apiUrl: d.url, sandboxUrl: d.url, timeoutMs: 600_000 };
const load = () =>
  loadavg()
    .map((x) => x.toFixed(2))
    .join(' ');

async function warmOf(): Promise<NodeView['warm']> {
  return (await client.nodes())[0]?.warm;
}

async function until(probe: () => Promise<boolean>): Promise<void> {
  while (!(await probe())) await new Promise((r) => setTimeout(r, 50));
}

/** n creates at c=1 (each killed before the next); `before` runs ahead of each, untimed. */
async function run(name: string, before: () => Promise<void>): Promise<void> {
  const ms: number[] = [];
  const w0 = await warmOf();
  const l0 = load();
  for (let i = 0; i < n; i++) {
    await before();
    const t0 = performance.now();
    const s = await Sandbox.create(template, opts);
    ms.push(performance.now() - t0);
    await s.kill();
  }
  const w1 = await warmOf();
  ms.sort((a, b) => a - b);
  const hits = (w1?.hits ?? 0) - (w0?.hits ?? 0);
  const misses = (w1?.misses ?? 0) - (w0?.misses ?? 0);
  console.log(
    `| ${name} | ${n} | ${percentile(ms, 50).toFixed(1)} ms | ${percentile(ms, 99).toFixed(1)} ms | ${ms[0]!.toFixed(1)} ms | ${hits}/${misses} | ${l0} -> ${load()} |`,
  );
}

const template = values['code-interpreter'] ? 'code-interpreter-v1' : 'slow';

try {
  if (values['code-interpreter']) {
    const build = resolve(import.meta.dirname, '../recipes/code-interpreter/build.mjs');
    await promisify(execFile)(process.execPath, [build, '--import'], {
      env: { ...process.env, CUBE_API_URL: d.url, CUBE_API_KEY: d.apiKey },
      maxBuffer: 2 ** 24,
    });
  } else {
    const image = await dockerArchive([await tarOf(busyboxLayer())], {});
    await client.importTemplate(
      'slow',
      (async function* () {
        yield image;
      })(),
      { startCmd: `sleep ${readySec}; touch /tmp/ready; exec sleep 100000`, readyCmd: 'test -e /tmp/ready' },
    );
  }
  const what = values['code-interpreter'] ? 'the kernel server' : `start command ready after ${readySec} s`;
  console.log(`${new Date().toISOString()} template '${template}' (${what}); c=1, n=${n} per run`);
  console.log('| run | n | p50 | p99 | min | hits/misses | load before -> after |');
  console.log('|---|---|---|---|---|---|---|');
  await client.setConfig('warm_pool.size', 0);
  await run('cold (warm_pool.size 0)', async () => {});
  await client.setConfig('warm_pool.size', 1);
  await Sandbox.create(template, opts).then((s) => s.kill()); // the first create marks the template used
  const ready = async () => ((await warmOf())?.templates[template]?.ready ?? 0) >= 1;
  await run('paced (next create once one is ready)', () => until(ready));
  await until(ready);
  await run('eager (back to back)', async () => {});
} finally {
  await d.stop();
  await rm(scratch, { recursive: true, force: true });
}
