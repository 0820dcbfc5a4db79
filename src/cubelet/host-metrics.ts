// What the host reports: CPU count and time, memory, disk usage of the data dir. Reads /proc
// and statfs only; the arithmetic lives in node-view.ts.
import { readFileSync } from 'node:fs';
import { statfs } from 'node:fs/promises';
import { availableParallelism } from 'node:os';

export interface CpuTimes {
  busy: number;
  total: number;
}

/** Aggregate jiffies from the first line of /proc/stat (iowait counts as idle). */
export function parseProcStat(text: string): CpuTimes {
  const line = text.split('\n', 1)[0] ?? '';
  const f = line.trim().split(/\s+/).slice(1).map(Number);
  const total = f.slice(0, 8).reduce((s, x) => s + (Number.isFinite(x) ? x : 0), 0);
  const idle = (f[3] ?? 0) + (f[4] ?? 0);
  return { busy: total - idle, total };
}

export function cpuUtilPercent(prev: CpuTimes, cur: CpuTimes): number {
  const dt = cur.total - prev.total;
  return dt > 0 ? Math.max(0, Math.min(100, ((cur.busy - prev.busy) / dt) * 100)) : 0;
}

/** CPU time used over a wall-clock interval as percent of `cpus` CPUs, clamped to 0-100. */
export function sandboxCpuPercent(usedUsec: number, wallMs: number, cpus: number): number {
  if (!(wallMs > 0 && cpus > 0)) return 0;
  return Math.max(0, Math.min(100, (usedUsec / (wallMs * 1000 * cpus)) * 100));
}

/** MiB values of /proc/meminfo fields. */
export function parseMeminfo(text: string): { totalMiB: number; availableMiB: number } {
  const kb = (key: string) => Number(new RegExp(`^${key}:\\s+(\\d+)`, 'm').exec(text)?.[1] ?? 0);
  return { totalMiB: Math.floor(kb('MemTotal') / 1024), availableMiB: Math.floor(kb('MemAvailable') / 1024) };
}

export function readCpuTimes(): CpuTimes {
  return parseProcStat(readFileSync('/proc/stat', 'utf8'));
}

export function readMeminfo(): { totalMiB: number; availableMiB: number } {
  return parseMeminfo(readFileSync('/proc/meminfo', 'utf8'));
}

export function hostCpus(): number {
  return availableParallelism();
}

/** Used share of the filesystem holding `dir`, as df computes it (used / (used + available to users)). */
export async function diskUsedPercent(dir: string): Promise<number> {
  const s = await statfs(dir);
  const used = s.blocks - s.bfree;
  const denom = used + s.bavail;
  return denom > 0 ? Math.round((used / denom) * 1000) / 10 : 0;
}

/** The host readings a node's view takes; a process standing for many simulated nodes shares one (sharedHostReadings). */
export interface HostReadings {
  cpuTimes(): CpuTimes;
  meminfo(): { totalMiB: number; availableMiB: number };
  diskUsedPercent(dir: string): Promise<number>;
}

export const HOST: HostReadings = { cpuTimes: readCpuTimes, meminfo: readMeminfo, diskUsedPercent };

/**
 * Readings kept for `maxAgeMs`, for nodes that share one host (the sim runtime's): 1000 simulated
 * nodes each reading /proc/stat, /proc/meminfo and statfs per heartbeat were a fifth of the
 * simulated nodes' process CPU in the 1000-node bench. The disk figure is the first `dir` asked
 * for: such nodes' data dirs are all under one data dir, on one filesystem. Once that dir is
 * gone (its nodes stopped and removed, as tests sharing a process do), the dir asked for next
 * takes its place: kept for good, every later node's view failed with its ENOENT.
 */
export function sharedHostReadings(maxAgeMs: number): HostReadings {
  const memo = <T>(read: () => T): (() => T) => {
    let at = -Infinity;
    let value: T;
    return () => {
      if (Date.now() - at >= maxAgeMs) {
        value = read();
        at = Date.now();
      }
      return value;
    };
  };
  const cpuTimes = memo(readCpuTimes);
  const meminfo = memo(readMeminfo);
  let disk: { dir: string; read: () => Promise<number> } | undefined;
  const readFor = (dir: string) => {
    const kept = {
      dir,
      read: memo(() => {
        const p = diskUsedPercent(dir);
        p.catch(() => disk === kept && (disk = undefined)); // a failed read is not kept
        return p;
      }),
    };
    return (disk = kept);
  };
  return {
    cpuTimes,
    meminfo,
    diskUsedPercent(dir) {
      const d = disk ?? readFor(dir);
      return d.dir === dir ? d.read() : d.read().catch(() => (disk ?? readFor(dir)).read());
    },
  };
}
