// What a files-API listing of a large directory costs cubed: CPU of cubed's process (utime+stime of
// it and its threads, /proc/<pid>/stat) and wall time of `files.list` through the unchanged e2b
// SDK, for a directory of --files empty files made in a fresh sandbox. Against a running cubed:
//   CUBE_API_KEY=... node --import tsx bench/list-cost.ts [--files 100000] [--runs 2] [--url http://127.0.0.1:3000] [--pid PID]
import { readFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import { parseArgs } from 'node:util';
import { Sandbox } from 'e2b';
import { cpuMs } from './proc-stat.js';

const { values } = parseArgs({
  options: {
    files: { type: 'string', default: '100000' },
    runs: { type: 'string', default: '2' },
    url: { type: 'string', default: 'http://127.0.0.1:3000' },
    pid: { type: 'string', default: '' },
  },
});
const apiKey = process.env.CUBE_API_KEY ?? readFileSync('/var/lib/cubed/api-key', 'utf8').trim();
const pid = values.pid || readFileSync('/var/lib/cubed/cubed.pid', 'utf8').trim();
const o = { apiKey, apiUrl: values.url, sandboxUrl: values.url };
const n = Number(values.files);
const sbx = await Sandbox.create({ ...o, timeoutMs: 600_000 });
try {
  await sbx.commands.run(`mkdir -p /home/user/m && cd /home/user/m && seq ${n} | xargs touch`, { timeoutMs: 300_000 });
  for (let r = 0; r < Number(values.runs); r++) {
    const c0 = cpuMs(pid);
    const t0 = performance.now();
    const entries = await sbx.files.list('/home/user/m', { depth: 1 });
    const wall = performance.now() - t0;
    if (entries.length !== n) throw new Error(`listed ${entries.length} of ${n}`);
    console.log(`list of ${n}: cubed CPU ${cpuMs(pid) - c0} ms, wall ${Math.round(wall)} ms (load ${loadavg()[0]!.toFixed(2)})`);
  }
} finally {
  await sbx.kill();
}
