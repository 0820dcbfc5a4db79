// A process's CPU for the bench scripts, from /proc/<pid>/stat: the fields after its command name
// (which may hold spaces and parentheses, hence the last ')'), and its utime + stime so far.
import { readFileSync } from 'node:fs';

/** Clock ticks a second of /proc's times (USER_HZ, 100 on Linux). */
export const CLK_TCK = 100;

/** Fields from the state on: 0 state, 1 ppid, 11 utime, 12 stime, 13 cutime, 14 cstime (in ticks). Throws when the process is gone. */
export function statFields(pid: number | string): string[] {
  const s = readFileSync(`/proc/${pid}/stat`, 'utf8');
  return s.slice(s.lastIndexOf(')') + 2).split(' ');
}

/** utime + stime of `pid` so far, in ms. */
export function cpuMs(pid: number | string): number {
  const f = statFields(pid);
  return ((Number(f[11]) + Number(f[12])) * 1000) / CLK_TCK;
}
