// What one sandbox's fsync-heavy writer does to its neighbours' fsync latency (issue 29 item 7),
// with and without the I/O limits of cubelet sandbox_limits.io: a probe writes 4 KiB and fsyncs it
// every 10 ms, in another sandbox (--probe sandbox: the same store) or on the host (--probe host:
// the data dir's filesystem, the disk under the store's image), while a sandbox writes `--bs`
// bytes + fsync in a loop into its layer. Rounds alternate idle, unlimited, limited. The node sets
// no limit; the limited sandbox asks for the limits as a create would (cube.io.* labels), so both
// run on one store.
// Run as root: npx tsx bench/io-neighbour.ts [--probe sandbox|host] [--rounds 3] [--seconds 15] [--bs 1048576] [--limits write_mibps=32,write_iops=500]
import { spawn } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { newSandboxID, nodeTag } from '../src/ids.js';
import { DEFAULT_IO_LIMITS, DEFAULT_SANDBOX_LIMITS, IO_KEYS, IO_LABELS, limitAsk, type IoLimits } from '../src/model/limits.js';
import { percentile } from '../src/model/stats.js';
import { NsDriver } from '../src/runtime/ns/driver.js';
import type { LaunchSpec, SandboxHandle } from '../src/runtime/types.js';
import { TemplateStore } from '../src/templates/store.js';

const { values } = parseArgs({
  options: {
    rounds: { type: 'string', default: '3' },
    seconds: { type: 'string', default: '15' },
    bs: { type: 'string', default: String(1024 * 1024) },
    limits: { type: 'string' },
    probe: { type: 'string', default: 'sandbox' },
  },
});
const seconds = Number(values.seconds);

/** --limits as the labels a create would carry, else the node defaults. */
function limitsOf(arg: string | undefined): Partial<IoLimits> {
  if (arg === undefined) return Object.fromEntries(IO_KEYS.filter((k) => DEFAULT_IO_LIMITS[k] > 0).map((k) => [k, DEFAULT_IO_LIMITS[k]]));
  const labels = Object.fromEntries(
    arg
      .split(',')
      .map((kv) => kv.split('='))
      .map(([k, v]) => [`cube.io.${k}`, v ?? '']),
  );
  const asked = limitAsk(labels);
  if ('problem' in asked) throw new Error(asked.problem);
  return asked.ask.io ?? {};
}
const limited = limitsOf(values.limits);

const PROBE = `
import os, sys, time
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
end = time.time() + float(sys.argv[2])
while time.time() < end:
    os.write(fd, b'x' * 4096)
    t = time.perf_counter(); os.fsync(fd); print((time.perf_counter() - t) * 1000)
    time.sleep(0.01)
os.unlink(sys.argv[1])`;
const WRITER = `
import os, sys, time
bs = int(sys.argv[1]); end = time.time() + float(sys.argv[2])
fd = os.open('/root/io-writer', os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
buf = os.urandom(bs); n = 0; t0 = time.time()
while time.time() < end:
    os.write(fd, buf); os.fsync(fd); n += 1
    if (n + 1) * bs % (512 << 20) < bs: os.lseek(fd, 0, 0)
print(n * bs / (time.time() - t0) / 1048576, n / (time.time() - t0))`;

const lines = (out: string) => out.split('\n').filter(Boolean).map(Number);
function hostProbe(dir: string): Promise<number[]> {
  return new Promise((resolve, reject) => {
    const p = spawn('python3', ['-c', PROBE, join(dir, 'fsync-probe'), String(seconds - 2)], { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    p.stdout.on('data', (b: Buffer) => (out += b.toString()));
    p.on('error', reject);
    p.on('close', () => resolve(lines(out)));
  });
}

const dataDir = await mkdtemp(join(tmpdir(), 'cubed-bench-io-'));
const none: IoLimits = { readMiBps: 0, writeMiBps: 0, readIops: 0, writeIops: 0 };
const driver = new NsDriver({ dataDir, nodeTag: nodeTag(`bench-io-${process.pid}`), sandboxLimits: { ...DEFAULT_SANDBOX_LIMITS, io: none } });
const fmt = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return `fsync p50 ${percentile(s, 50).toFixed(1)} p90 ${percentile(s, 90).toFixed(1)} p99 ${percentile(s, 99).toFixed(1)} ms (n=${s.length})`;
};
const load = async () => (await readFile('/proc/loadavg', 'utf8')).split(' ').slice(0, 3).join(' ');
const results: Record<string, number[]> = { idle: [], unlimited: [], limited: [] };

try {
  await driver.init();
  const template = await new TemplateStore(dataDir).resolve('host');
  const spec = (io?: Partial<IoLimits>): LaunchSpec => ({
    sandboxID: newSandboxID(),
    template,
    cpus: 1,
    memoryMiB: 1024,
    pidsMax: 128,
    diskGiB: 2,
    env: {},
    ...(io ? { limits: { io } } : {}),
  });
  const labels = IO_KEYS.filter((k) => limited[k] !== undefined).map((k) => `${IO_LABELS[k]}=${limited[k]}`);
  console.log(`limited: ${labels.join(' ') || '(none: the defaults are 0)'}; writer ${values.bs} B + fsync; ${seconds} s per case; probe ${values.probe}`);
  const neighbour = values.probe === 'sandbox' ? await driver.create(spec()) : undefined;
  const sandboxProbe = async (h: SandboxHandle): Promise<number[]> => {
    const p = driver.exec(h, { argv: ['python3', '-c', PROBE, '/root/fsync-probe', String(seconds - 2)], user: 'root' });
    let out = '';
    p.stdout.on('data', (b: Buffer) => (out += b.toString()));
    await p.exited;
    return lines(out);
  };
  for (let r = 0; r < Number(values.rounds); r++) {
    for (const kind of ['idle', 'unlimited', 'limited'] as const) {
      const before = await load();
      let h: SandboxHandle | undefined;
      let writer: Promise<string> | undefined;
      if (kind !== 'idle') {
        h = await driver.create(spec(kind === 'limited' ? limited : undefined));
        const p = driver.exec(h, { argv: ['python3', '-c', WRITER, String(values.bs), String(seconds)], user: 'root' });
        let out = '';
        p.stdout.on('data', (b: Buffer) => (out += b.toString()));
        writer = p.exited.then(() => out);
        await new Promise((res) => setTimeout(res, 1000));
      }
      const lat = neighbour ? await sandboxProbe(neighbour) : await hostProbe(dataDir);
      const wrote = writer ? (await writer).trim().split(' ').map(Number) : undefined;
      if (h) await driver.destroy(h.sandboxID);
      results[kind]!.push(...lat);
      const w = wrote ? `; writer ${wrote[0]!.toFixed(1)} MiB/s, ${wrote[1]!.toFixed(0)} fsync/s` : '';
      console.log(`round ${r + 1} ${kind.padEnd(9)} ${fmt(lat)}${w} (load ${before})`);
    }
  }
  for (const [kind, lat] of Object.entries(results)) console.log(`all ${kind.padEnd(9)} ${fmt(lat)}`);
} finally {
  await driver.cleanup(new Set());
  await driver.close({ destroy: true });
  await rm(dataDir, { recursive: true, force: true });
}
