// Imports a generated image of about --mib MiB (a busybox layer and a layer of 1 MiB random files,
// as a docker-archive) through a real cubed's admin API (as `cubectl template import` does), then
// imports it again under another name (every layer already stored), and prints both times.
// Needs `npm run build` first.
//   npx tsx bench/template-import.ts [--mib 200] [--cidr 10.199.0.0/16]
import { createReadStream } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { parseArgs } from 'node:util';
import { CubeClient } from '../src/cli/client.js';
import { busyboxLayer, dockerArchive, tarOf } from '../test/helpers/images.js';
import { startBenchDaemon } from './daemon.js';

const { values } = parseArgs({ options: { mib: { type: 'string', default: '200' }, cidr: { type: 'string', default: '10.199.0.0/16' }, 'cpu-prof-dir': { type: 'string' } } });
const mib = Number(values.mib);
const scratch = await mkdtemp(join(tmpdir(), 'cube-bench-import-'));
const prof = values['cpu-prof-dir'];
const d = await startBenchDaemon({ cidr: values.cidr!, tapInit: 4, ...(prof ? { nodeArgs: ['--cpu-prof', `--cpu-prof-dir=${prof}`] } : {}) });
try {
  const files = Array.from({ length: mib }, (_, i) => ({ name: `data/f${i}`, content: randomBytes(1 << 20) }));
  const image = await dockerArchive([await tarOf(busyboxLayer()), await tarOf([{ name: 'data/', type: 'directory' as const }, ...files])], { Env: ['A=1'] });
  const file = join(scratch, 'image.tar');
  await writeFile(file, image);
  const client = new CubeClient({ baseUrl: d.url, apiKey: d.apiKey });
  const time = async (name: string) => {
    const t0 = performance.now();
    const rec = await client.importTemplate(name, createReadStream(file));
    return { ms: Math.round(performance.now() - t0), layers: rec.layers.length };
  };
  const cold = await time('bench-import');
  const warm = await time('bench-import-again');
  console.log(JSON.stringify({ archiveMiB: +(image.length / 2 ** 20).toFixed(1), cold, layersStored: warm }));
} finally {
  await d.stop();
  await rm(scratch, { recursive: true, force: true });
}
