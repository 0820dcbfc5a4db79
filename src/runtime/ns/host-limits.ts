// Host-wide tables a sandbox could exhaust for the whole node (issue 12 item 3), sized here from
// the host's own figures: the node's parent cgroup takes at most a share of the host's tasks,
// kernel.pid_max gets headroom at start, and each sandbox's open files per process are bounded so
// that a sandbox at its pids limit holds at most its share of fs.file-max.
import { readFile, writeFile } from 'node:fs/promises';
import type { Logger } from 'pino';
import type { ParentLimits } from './cgroups.js';

/** PID_MAX_LIMIT of 64-bit kernels, systemd's default since v243. */
export const PID_MAX_TARGET = 4_194_304;

/** The pid_max to write at start, or undefined when the host already has the headroom (pure). */
export function pidMaxRaise(current: number): number | undefined {
  return current < PID_MAX_TARGET ? PID_MAX_TARGET : undefined;
}

/**
 * pids.max of the node's parent cgroup (pure): the host's task ceiling (the smaller of pid_max and
 * threads-max, both host-wide) minus a reserve for the host, an eighth and at least 4096, so that
 * fork bombs in every sandbox at once still leave cubed and host accounts room to fork.
 */
export function parentPidsMax(pidMax: number, threadsMax: number): number {
  const ceiling = Math.min(pidMax, threadsMax);
  return Math.max(1, ceiling - Math.max(4096, Math.floor(ceiling / 8)));
}

/**
 * The node's parent cgroup limits (pure), the same whichever runtime makes the parent: pids from
 * the host's tables, memory at the node's declared quota (none declared: not limited). Both
 * drivers of a node share the parent, and either may make it again after a full cleanup.
 */
export function nodeParentLimits(tables: Pick<HostTables, 'pidMax' | 'threadsMax'>, declaredMemoryMiB: number | undefined): ParentLimits {
  return { pidsMax: parentPidsMax(tables.pidMax, tables.threadsMax), ...(declaredMemoryMiB ? { memoryMiB: declaredMemoryMiB } : {}) };
}

/**
 * RLIMIT_NOFILE's floor: under it a sandbox gets fewer processes instead (fileLimits). 512, not
 * the 1024 most programs expect as a soft limit: at the default share on this machine (fs.file-max
 * 2,466,097 / 16 = 154,131 files) a 1024 floor leaves 150 tasks of the 1024 pids_max, and tasks
 * count threads (a JVM or a browser takes 30-100 each); 512 leaves 301, and programs rarely hold
 * more than a few hundred descriptors (macOS's soft default is 256).
 */
export const NOFILE_FLOOR = 512;
/** The fewest tasks a sandbox is left with (the schema's minimum pids_max). */
const PIDS_FLOOR = 8;

/** What a sandbox's processes may hold of the host's file table (fileLimits). */
export interface FileLimits {
  /** Its share: files its processes hold together at most (pidsMax x nofile never exceeds it). */
  openFiles: number;
  /** RLIMIT_NOFILE (soft = hard) of each of its commands. */
  nofile: number;
  /** Its pids.max: the spec's, lowered when the share does not give each NOFILE_FLOOR files. */
  pidsMax: number;
}

/**
 * A sandbox's share of fs.file-max (pure): open files count against it per process (dup'ed and
 * inherited descriptors aside), so pids x RLIMIT_NOFILE bounds what a sandbox's processes hold
 * together. The share is `share` of file-max (cubelet sandbox_limits.open_files_share), or the
 * `asked` number of files when a create asks for less (more: the problem, a string). RLIMIT_NOFILE
 * is the share over the pids, never under NOFILE_FLOOR (pids are lowered instead) nor over
 * nr_open's default 1048576 or the daemon's own hard limit `hard` (raising past it needs
 * CAP_SYS_RESOURCE, which some hosts withhold: EPERM measured here). Open files count against
 * fs.file-max for every process without CAP_SYS_ADMIN, so cubed itself keeps opening files when
 * the table is full. Before, nofile was a quarter of file-max over the pids with a 1024 floor:
 * 1024 pids x 1024 files, 42% of this machine's table per sandbox, three exhausted it.
 */
export function fileLimits(fileMax: number, share: number, pidsMax: number, hard: number, asked?: number): FileLimits | string {
  const bound = Math.floor(Math.min(fileMax * share, Number.MAX_SAFE_INTEGER));
  const least = NOFILE_FLOOR * PIDS_FLOOR;
  if (asked !== undefined && (asked > bound || asked < least))
    return `open files ${asked}: from ${least} to this node's share ${bound} (cubelet sandbox_limits.open_files_share ${share} of fs.file-max ${fileMax})`;
  const openFiles = Math.max(least, asked ?? bound);
  const nofile = Math.min(hard, 1_048_576, Math.max(NOFILE_FLOOR, Math.floor(openFiles / pidsMax)));
  return { openFiles, nofile, pidsMax: Math.min(pidsMax, Math.max(PIDS_FLOOR, Math.floor(openFiles / nofile))) };
}

/** The hard "Max open files" of /proc/self/limits (pure; Infinity for unlimited). */
export function hardNofile(limits: string): number {
  const m = /^Max open files\s+\S+\s+(\S+)/m.exec(limits);
  return !m || m[1] === 'unlimited' ? Infinity : Number(m[1]);
}

async function readNumber(path: string): Promise<number> {
  return Number((await readFile(path, 'utf8')).trim());
}

/** The host's figures the limits above are computed from. */
export interface HostTables {
  pidMax: number;
  threadsMax: number;
  fileMax: number;
  /** This process's hard RLIMIT_NOFILE (the launcher it spawns has the same). */
  nofileHard: number;
}

/** Reads the host tables, raising kernel.pid_max first when it is low (logged: it is a host setting). */
export async function hostTables(log?: Logger): Promise<HostTables> {
  let pidMax = await readNumber('/proc/sys/kernel/pid_max');
  const raise = pidMaxRaise(pidMax);
  if (raise !== undefined) {
    await writeFile('/proc/sys/kernel/pid_max', String(raise));
    log?.info({ from: pidMax, to: raise }, 'raised kernel.pid_max: the host had too few pids for a node of sandboxes with fork bombs at their limit');
    pidMax = raise;
  }
  const [threadsMax, fileMax, limits] = await Promise.all([
    readNumber('/proc/sys/kernel/threads-max'),
    readNumber('/proc/sys/fs/file-max'),
    readFile('/proc/self/limits', 'utf8'),
  ]);
  return { pidMax, threadsMax, fileMax, nofileHard: hardNofile(limits) };
}
