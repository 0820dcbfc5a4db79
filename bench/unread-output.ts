// What background commands whose output nobody reads cost cubed (issue 30 item 1): N `cat
// /dev/zero` started through envd's Process/Start over raw HTTP, the answers never read (the
// Python SDK's `background=True` handle nobody waits on), for --seconds; then the sandbox is
// deleted. Prints, every second, cubed's resident size and peak (VmRSS, VmHWM), its anonymous
// memory (smaps_rollup), process.memoryUsage() of cubed (heap, external, array buffers: sampled
// inside it by a --import preload), and the CPU cubed and its launch helper burnt since the last
// line; at the end the figures the hostile test checks (peak and after the kill, over the start).
// Run as root after `npm run build`: npx tsx bench/unread-output.ts [--procs 3] [--seconds 30] [--cmd 'cat /dev/zero']
// [--heapsnapshot-dir DIR]: cubed writes a heap snapshot on SIGUSR2; one is taken at the end of the run.
import { readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { call } from '../test/helpers/daemon.js';
import { startBenchDaemon } from './daemon.js';
import { startUnread } from '../test/helpers/envd-raw.js';
import { cpuMs } from './proc-stat.js';

const { values } = parseArgs({
  options: {
    procs: { type: 'string', default: '3' },
    seconds: { type: 'string', default: '30' },
    cmd: { type: 'string', default: 'cat /dev/zero' },
    cidr: { type: 'string', default: '10.197.0.0/16' },
    'heapsnapshot-dir': { type: 'string' },
  },
});

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const mib = (n: number) => (n / 2 ** 20).toFixed(0);
const memFile = join(tmpdir(), `unread-output-${process.pid}.json`);
// Sampled inside cubed: process.memoryUsage() twice a second into memFile.
const preload = `data:text/javascript,import{writeFileSync}from'node:fs';setInterval(()=>writeFileSync(${JSON.stringify(memFile)},JSON.stringify(process.memoryUsage())),500).unref();`;
const snapDir = values['heapsnapshot-dir'];
const nodeArgs = [`--import=${preload}`, ...(snapDir ? ['--heapsnapshot-signal=SIGUSR2', `--diagnostic-dir=${snapDir}`] : [])];

const d = await startBenchDaemon({ cidr: values.cidr!, tapInit: 4, nodeArgs });

function status(pid: number): { rss: number; hwm: number } {
  const s = readFileSync(`/proc/${pid}/status`, 'utf8');
  const kib = (k: string) => Number(new RegExp(`^${k}:\\s+(\\d+) kB`, 'm').exec(s)![1]) * 1024;
  return { rss: kib('VmRSS'), hwm: kib('VmHWM') };
}
const anon = (pid: number) => Number(/^Anonymous:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/smaps_rollup`, 'utf8'))![1]) * 1024;
/** The launch helper: cubed's child running `cube-launch serve`. */
function helperPid(): number | undefined {
  for (const p of readdirSync('/proc')) {
    if (!/^\d+$/.test(p)) continue;
    try {
      const stat = readFileSync(`/proc/${p}/stat`, 'utf8');
      if (Number(stat.split(') ')[1]!.split(' ')[1]) !== d.pid) continue;
      if (readFileSync(`/proc/${p}/cmdline`, 'utf8').split('\0').includes('serve')) return Number(p);
    } catch {
      // gone meanwhile
    }
  }
  return undefined;
}
function inside(): string {
  try {
    const m = JSON.parse(readFileSync(memFile, 'utf8')) as NodeJS.MemoryUsage;
    return `heap ${mib(m.heapUsed)}/${mib(m.heapTotal)} external ${mib(m.external)} arrayBuffers ${mib(m.arrayBuffers)}`;
  } catch {
    return '';
  }
}
const load = () => readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ');

try {
  const r = await call(d, 'POST', '/sandboxes', { templateID: 'base', secure: true, timeout: 600 });
  if (r.status !== 201) throw new Error(`create: ${r.status} ${JSON.stringify(r.json)}`);
  const s = r.json as { sandboxID: string; envdAccessToken: string };
  await sleep(2000);
  writeFileSync(`/proc/${d.pid}/clear_refs`, '5');
  const before = status(d.pid);
  const helper = helperPid();
  let last = { cubed: cpuMs(d.pid), helper: helper ? cpuMs(helper) : 0 };
  const line = (label: string) => {
    const st = status(d.pid);
    const now = { cubed: cpuMs(d.pid), helper: helper ? cpuMs(helper) : 0 };
    console.log(
      `${label}: rss ${mib(st.rss)} peak ${mib(st.hwm)} anon ${mib(anon(d.pid))} MiB; ${inside()}; cpu cubed ${Math.round((now.cubed - last.cubed) / 10)}% helper ${Math.round((now.helper - last.helper) / 10)}%; load ${load()}`,
    );
    last = now;
    return st;
  };
  console.log(`${values.procs} x '${values.cmd}', unread, for ${values.seconds} s (cubed ${d.pid}, helper ${helper})`);
  line('before');
  const stops = Array.from({ length: Number(values.procs) }, () => startUnread(d.url, s, values.cmd!));
  for (let t = 1; t <= Number(values.seconds); t++) {
    await sleep(1000);
    line(`${t} s`);
  }
  const during = status(d.pid);
  if (snapDir) process.kill(d.pid, 'SIGUSR2');
  const del = await call(d, 'DELETE', `/sandboxes/${s.sandboxID}`);
  for (const stop of stops) stop();
  let after = status(d.pid);
  for (let t = 1; t <= 4; t++) {
    await sleep(1000);
    const st = line(`killed (${del.status}) +${t} s`);
    if (t === 2) after = st;
  }
  console.log(`from ${mib(before.rss)} MiB: peak +${mib(during.hwm - before.rss)}, after the kill (+2 s) +${mib(after.rss - before.rss)} MiB; load ${load()}`);
} finally {
  await d.stop();
}
