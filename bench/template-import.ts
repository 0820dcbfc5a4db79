// Imports a generated image of about --mib MiB (a busybox layer and a layer of 1 MiB random files,
// as a docker-archive) through a real cubed's admin API (as `cubectl template import` does), then
// imports it again under another name (every layer already stored), and prints both times. Then
// the per-sandbox store overhead: --idle N idle sandboxes from the host template, then N from the
// imported image, each time the sandbox store's used bytes (statfs after a btrfs sync: subvolume,
// qgroup and overlay upper, data and metadata) before and after, divided by N, and the median of
// the sandboxes' own qgroup figures (referenced and exclusive bytes of each subvolume).
// Needs `npm run build` first.
//   npx tsx bench/template-import.ts [--mib 200] [--idle 20] [--cidr 10.199.0.0/16]
import { createReadStream } from 'node:fs';
import { mkdtemp, rm, statfs, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { parseArgs } from 'node:util';
import { execa } from 'execa';
import { CubeClient } from '../src/cli/client.js';
import { busyboxLayer, dockerArchive, tarOf } from '../test/helpers/images.js';
import { startBenchDaemon } from './daemon.js';

const { values } = parseArgs({
  options: {
    mib: { type: 'string', default: '200' },
    idle: { type: 'string', default: '20' },
    cidr: { type: 'string', default: '10.199.0.0/16' },
    'cpu-prof-dir': { type: 'string' },
  },
});
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
  const store = join(d.dataDir, 'store');
  const used = async () => {
    await execa('btrfs', ['filesystem', 'sync', store]);
    const st = await statfs(store);
    return (st.blocks - st.bfree) * st.bsize;
  };
  /** Store bytes per idle sandbox of `templateID` (N created, measured, destroyed). */
  const overhead = async (templateID: string) => {
    const n = Number(values.idle);
    const before = await used();
    const ids: string[] = [];
    try {
      for (let i = 0; i < n; i++) ids.push((await client.createSandbox({ templateID, timeoutSec: 600 })).sandboxID);
      await new Promise((r) => setTimeout(r, 2000)); // let the idle sandboxes settle (their first writes land)
      const delta = (await used()) - before;
      // `btrfs qgroup show -f --raw PATH`: the subvolume's own qgroup line, "0/ID RFER EXCL".
      const q = await Promise.all(
        ids.map(async (id) =>
          (await execa('btrfs', ['qgroup', 'show', '-f', '--raw', join(store, 'sandboxes', id)])).stdout
            .split('\n')
            .map((l) => l.trim().split(/\s+/))
            .find((f) => /^0\/\d+$/.test(f[0] ?? ''))!,
        ),
      );
      const med = (xs: number[]) => xs.sort((a, b) => a - b)[xs.length >> 1]!;
      return {
        sandboxes: n,
        storeKiBPerSandbox: Math.round(delta / n / 1024),
        qgroupKiB: { referenced: med(q.map((f) => Number(f[1]))) / 1024, exclusive: med(q.map((f) => Number(f[2]))) / 1024 },
      };
    } finally {
      for (const id of ids) await client.deleteSandbox(id);
    }
  };
  const idleHost = await overhead('host');
  const idleImage = await overhead('bench-import');
  console.log(
    JSON.stringify({ archiveMiB: +(image.length / 2 ** 20).toFixed(1), cold, layersStored: warm, storeOverhead: { host: idleHost, image: idleImage } }),
  );
} finally {
  await d.stop();
  await rm(scratch, { recursive: true, force: true });
}
