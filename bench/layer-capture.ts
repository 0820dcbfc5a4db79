// How a template build step's writable layer becomes a layer (issue 29 item 6): the snapshot the
// build takes now (BtrfsStore.captureUpper: the step sandbox's subvolume snapshotted, its upper
// dir's entries renamed to the root) against the baseline, the copy it made before (`cp -a
// --reflink=auto UPPER <data dir>/layers/tmp/...`, onto the data dir's filesystem, the host's root
// here), both on the same upper dir of --mib MiB of random data, alternating, --rounds times, in
// one window. The copy is timed as the build waited for it, and with its `sync -f` (the bytes the
// host's disk then writes). Runs on a loop-mounted store of its own under a temporary data dir,
// removed at the end. Needs `npm run build:native` first.
//   npx tsx bench/layer-capture.ts [--rounds 3] [--mib 1024]
import { mkdir, mkdtemp, readFile, rm } from 'node:fs/promises';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { execa } from 'execa';
import { LaunchHelper, nativeBinary } from '../src/runtime/ns/helper.js';
import { BtrfsStore } from '../src/storage/btrfs-store.js';

const { values } = parseArgs({ options: { rounds: { type: 'string', default: '3' }, mib: { type: 'string', default: '1024' } } });
const rounds = Number(values.rounds);
const mib = Number(values.mib);
const dataDir = await mkdtemp(join(tmpdir(), 'cube-bench-capture-'));
const store = new BtrfsStore({ dataDir, helper: new LaunchHelper(nativeBinary('cube-launch')), imageGiB: Math.ceil((2 * mib) / 1024) + 2 });
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const ms = (t0: number) => Math.round(performance.now() - t0);
try {
  await store.open();
  const copyDir = join(dataDir, 'layers', 'tmp');
  await mkdir(copyDir, { recursive: true });
  const runs: { copyMs: number; copySyncMs: number; snapshotMs: number; load: string }[] = [];
  for (let r = 0; r < rounds; r++) {
    const id = `bench-${r}`;
    await store.take(id);
    const upper = store.upperDir(id);
    await execa('sh', ['-c', `head -c ${mib * 1048576} /dev/urandom > ${upper}/blob && mkdir -p ${upper}/etc && echo x > ${upper}/etc/x`]);
    await execa('sync', ['-f', join(upper, 'blob')]); // a step's writes are on disk by the time it ends (its memory limit forces writeback)
    const load = loadavg()[0]!.toFixed(1);
    const copy = async () => {
      let t0 = performance.now();
      await execa('cp', ['-a', '--reflink=auto', upper, join(copyDir, id)]);
      const copyMs = ms(t0);
      t0 = performance.now();
      await execa('sync', ['-f', join(copyDir, id, 'blob')]);
      return { copyMs, copySyncMs: copyMs + ms(t0) };
    };
    const snapshot = async () => {
      const t0 = performance.now();
      await store.captureUpper(id, join(store.path, 'layers-bench', id));
      return ms(t0);
    };
    await mkdir(join(store.path, 'layers-bench'), { recursive: true });
    let c: { copyMs: number; copySyncMs: number };
    let snapshotMs: number;
    if (r % 2 === 0) {
      c = await copy();
      snapshotMs = await snapshot();
    } else {
      snapshotMs = await snapshot();
      c = await copy();
    }
    // The snapshot holds the same bytes: checked, not assumed.
    const same = (await readFile(join(store.path, 'layers-bench', id, 'blob'))).equals(await readFile(join(copyDir, id, 'blob')));
    if (!same) throw new Error('the snapshot and the copy differ');
    runs.push({ ...c, snapshotMs, load });
    console.log(JSON.stringify({ round: r + 1, mib, ...c, snapshotMs, load1: load }));
    await rm(join(copyDir, id), { recursive: true, force: true });
    await rm(join(store.path, 'layers-bench', id), { recursive: true, force: true });
    await store.remove(id);
  }
  const copyMs = median(runs.map((x) => x.copyMs));
  const snapshotMs = median(runs.map((x) => x.snapshotMs));
  console.log(
    JSON.stringify({
      mib,
      rounds,
      medianCopyMs: copyMs,
      medianCopySyncMs: median(runs.map((x) => x.copySyncMs)),
      medianSnapshotMs: snapshotMs,
      snapshotOverCopy: +(snapshotMs / copyMs).toFixed(4),
      load1: loadavg()[0]!.toFixed(1),
    }),
  );
} finally {
  await store.close({ destroy: true });
  await rm(dataDir, { recursive: true, force: true });
}
