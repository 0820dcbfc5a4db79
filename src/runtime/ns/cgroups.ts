// Per-sandbox cgroups: v1 memory, cpu and pids for limits (this kernel binds those controllers to
// v1), cgroup2 for freeze/thaw and atomic kill, and I/O limits where the host has them (v1 blkio,
// else cgroup2's io). Every sandbox lives at `<own cgroup of this process>/cube-<tag>/<sandboxID>`
// in each hierarchy.
import { readFileSync, writeFileSync } from 'node:fs';
import { access, mkdir, readFile, rmdir, watch, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { CubeError } from '../../errors.js';
import { entriesOrNone } from '../../fsx.js';
import type { IoLimits } from '../../model/limits.js';

export type Hierarchy = 'memory' | 'cpu' | 'pids' | 'unified';
export const HIERARCHIES: readonly Hierarchy[] = ['memory', 'cpu', 'pids', 'unified'];

export interface CgroupLimits {
  memoryMiB: number;
  cpus: number;
  pidsMax: number;
  /** On these block devices ("MAJ:MIN", whole disks); absent or all 0: not limited. */
  io?: { devices: readonly string[]; limits: IoLimits };
}

/** Where a node's I/O limits are written: the v1 blkio hierarchy, or cgroup2's io controller. */
export type IoController = { kind: 'blkio'; parent: string } | { kind: 'io'; parent: string };

const MIB = 1024 * 1024;

/**
 * The files and lines that set `limits` on `devices` (pure), nothing for a limit of 0: v1 takes
 * one "MAJ:MIN value" line per write to blkio.throttle.*_device; cgroup2 one io.max line per
 * device. Throttling, not weights: the proportional policies need bfq, and disks here run
 * mq-deadline or none.
 */
export function ioLimitWrites(kind: IoController['kind'], devices: readonly string[], l: IoLimits): [file: string, line: string][] {
  const v1: [string, number][] = [
    ['blkio.throttle.read_bps_device', l.readMiBps * MIB],
    ['blkio.throttle.write_bps_device', l.writeMiBps * MIB],
    ['blkio.throttle.read_iops_device', l.readIops],
    ['blkio.throttle.write_iops_device', l.writeIops],
  ];
  if (kind === 'blkio') return devices.flatMap((d) => v1.filter(([, v]) => v > 0).map(([f, v]): [string, string] => [f, `${d} ${v}`]));
  const v2 = `rbps=${l.readMiBps * MIB || 'max'} wbps=${l.writeMiBps * MIB || 'max'} riops=${l.readIops || 'max'} wiops=${l.writeIops || 'max'}`;
  return v1.every(([, v]) => v === 0) ? [] : devices.map((d) => ['io.max', `${d} ${v2}`]);
}

/** Limits of the node's parent cgroup: all its sandboxes together (host-wide tables, issue 12 item 3). */
export interface ParentLimits {
  pidsMax: number;
  /** The node's declared memory (cubelet quota.memory_mib); none: not limited. */
  memoryMiB?: number;
}

/** Where each hierarchy is mounted, from /proc/self/mounts (pure). */
export function parseCgroupMounts(mounts: string): Partial<Record<Hierarchy | 'blkio', string>> {
  const out: Partial<Record<Hierarchy | 'blkio', string>> = {};
  for (const line of mounts.split('\n')) {
    const [, dir, type, opts] = line.split(' ');
    if (!dir || !opts) continue;
    if (type === 'cgroup2') out.unified ??= dir;
    if (type !== 'cgroup') continue;
    const names = opts.split(',');
    for (const h of ['memory', 'cpu', 'pids', 'blkio'] as const) if (names.includes(h)) out[h] ??= dir;
  }
  return out;
}

/** This process's own cgroup path in each hierarchy, from /proc/self/cgroup (pure). */
export function parseOwnCgroups(self: string): Partial<Record<Hierarchy | 'blkio', string>> {
  const out: Partial<Record<Hierarchy | 'blkio', string>> = {};
  for (const line of self.split('\n')) {
    const m = /^(\d+):([^:]*):(.*)$/.exec(line);
    if (!m) continue;
    const [, id, controllers, path] = m as unknown as [string, string, string, string];
    if (id === '0' && controllers === '') out.unified = path;
    for (const c of controllers.split(',')) if (c === 'memory' || c === 'cpu' || c === 'pids' || c === 'blkio') out[c] = path;
  }
  return out;
}

/** cfs_quota_us for `cpus` vCPUs (-1 = unlimited) (pure). */
export function cpuQuota(cpus: number, periodUs: number): number {
  return cpus > 0 ? Math.max(1000, Math.round(cpus * periodUs)) : -1;
}

/** The value of `key` in a flat-keyed cgroup file such as cgroup.events or memory.oom_control (pure). */
export function keyedValue(text: string, key: string): number | undefined {
  for (const line of text.split('\n')) {
    const [k, v] = line.split(' ');
    if (k === key && v !== undefined) return Number(v);
  }
  return undefined;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export class Cgroups {
  /** Parent directory `…/cube-<tag>` in each hierarchy. */
  readonly parents: Record<Hierarchy, string>;
  /** The v1 blkio parent when the host mounts it (I/O limits go there, and sandboxes join it). */
  readonly blkio: string | undefined;
  /** Where I/O limits go (init: blkio, else cgroup2's io when the parent can enable it); undefined: nowhere. */
  io: IoController | undefined;
  private cpuPeriodUs = 100_000;
  private parentLimits: ParentLimits | undefined;

  constructor(nodeTag: string, mounts = readFileSync('/proc/self/mounts', 'utf8'), self = readFileSync('/proc/self/cgroup', 'utf8')) {
    const where = parseCgroupMounts(mounts);
    const own = parseOwnCgroups(self);
    const parents = {} as Record<Hierarchy, string>;
    for (const h of HIERARCHIES) {
      const mount = where[h];
      const path = own[h];
      if (!mount || path === undefined) {
        throw new CubeError('CGROUP_FAILED', `cgroup hierarchy '${h}' is not mounted (need cgroup v1 memory, cpu, pids and cgroup2)`);
      }
      parents[h] = join(mount, path, `cube-${nodeTag}`);
    }
    this.parents = parents;
    this.blkio = where.blkio && own.blkio !== undefined ? join(where.blkio, own.blkio, `cube-${nodeTag}`) : undefined;
  }

  async init(parentLimits?: ParentLimits): Promise<void> {
    this.parentLimits = parentLimits;
    await this.makeParents();
    for (const f of ['cgroup.freeze', 'cgroup.kill']) {
      await access(join(this.parents.unified, f)).catch(() => {
        throw new CubeError('CGROUP_FAILED', `cgroup2 at ${this.parents.unified} has no ${f} (kernel >= 5.14 needed)`);
      });
    }
    this.cpuPeriodUs = Number(await readFile(join(this.parents.cpu, 'cpu.cfs_period_us'), 'utf8'));
    this.io = this.blkio !== undefined ? { kind: 'blkio', parent: this.blkio } : await this.ioV2();
  }

  /** cgroup2's io controller for the sandboxes, when this process's cgroup hands it down (else undefined). */
  private async ioV2(): Promise<IoController | undefined> {
    const offered = await readFile(join(this.parents.unified, 'cgroup.controllers'), 'utf8').catch(() => '');
    if (!offered.split(/\s+/).includes('io')) return undefined;
    await writeFile(join(this.parents.unified, 'cgroup.subtree_control'), '+io');
    return { kind: 'io', parent: this.parents.unified };
  }

  /** The per-node parents in every hierarchy (blkio too where mounted). */
  private parentDirs(): string[] {
    const dirs = HIERARCHIES.map((h) => this.parents[h]);
    return this.blkio !== undefined ? [...dirs, this.blkio] : dirs;
  }

  /** The sandbox's directory in every hierarchy it joins. */
  private dirs(sandboxID: string): string[] {
    return this.parentDirs().map((d) => join(d, sandboxID));
  }

  /** The per-node parents with their limits (again after a full cleanup removed them). */
  private async makeParents(): Promise<void> {
    await Promise.all(this.parentDirs().map((d) => mkdir(d, { recursive: true })));
    const l = this.parentLimits;
    if (!l) return;
    setValue(join(this.parents.pids, 'pids.max'), l.pidsMax);
    if (l.memoryMiB) this.limitMemory(this.parents.memory, l.memoryMiB * 1024 * 1024);
  }

  dir(h: Hierarchy, sandboxID: string): string {
    return join(this.parents[h], sandboxID);
  }

  /** The cgroup.procs files a process writes itself into to join the sandbox. */
  procsFiles(sandboxID: string): string[] {
    return this.dirs(sandboxID).map((d) => join(d, 'cgroup.procs'));
  }

  async create(sandboxID: string, limits: CgroupLimits): Promise<void> {
    await Promise.all(
      this.dirs(sandboxID).map((d) =>
        mkdir(d).catch(async (e: NodeJS.ErrnoException) => {
          if (e.code !== 'ENOENT') throw e;
          await this.makeParents(); // the parent went with a full cleanup
          await mkdir(d);
        }),
      ),
    );
    this.limitMemory(this.dir('memory', sandboxID), limits.memoryMiB * 1024 * 1024);
    setValue(join(this.dir('cpu', sandboxID), 'cpu.cfs_quota_us'), cpuQuota(limits.cpus, this.cpuPeriodUs));
    setValue(join(this.dir('pids', sandboxID), 'pids.max'), limits.pidsMax);
    this.limitIo(sandboxID, limits.io);
  }

  /** One write per line: the kernel takes one device's rule per write. */
  private limitIo(sandboxID: string, io: CgroupLimits['io']): void {
    if (io === undefined || this.io === undefined) return;
    const dir = join(this.io.parent, sandboxID);
    for (const [file, line] of ioLimitWrites(this.io.kind, io.devices, io.limits)) setValue(join(dir, file), line);
  }

  /** Memory, and memory+swap where swap is accounted, so a host with swap does not stretch the limit. */
  private limitMemory(dir: string, bytes: number): void {
    setValue(join(dir, 'memory.limit_in_bytes'), bytes);
    try {
      setValue(join(dir, 'memory.memsw.limit_in_bytes'), bytes);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw e;
    }
  }

  /** Sandbox ids that have a cgroup in any hierarchy. */
  async list(): Promise<Set<string>> {
    const ids = new Set<string>();
    for (const parent of this.parentDirs()) {
      const entries = await entriesOrNone(parent);
      for (const e of entries) if (e.isDirectory()) ids.add(e.name);
    }
    return ids;
  }

  async pids(sandboxID: string): Promise<number[]> {
    const text = await readFile(join(this.dir('unified', sandboxID), 'cgroup.procs'), 'utf8').catch(() => '');
    return text.split('\n').filter(Boolean).map(Number);
  }

  /** Freezes (true) or thaws (false) and waits until the kernel says it is done. */
  async freeze(sandboxID: string, frozen: boolean): Promise<void> {
    const dir = this.dir('unified', sandboxID);
    setValue(join(dir, 'cgroup.freeze'), frozen ? 1 : 0);
    await this.waitEvent(dir, 'frozen', frozen ? 1 : 0);
  }

  /** Kills every process, waits until the cgroup is empty and removes the cgroup everywhere. Idempotent. */
  async destroy(sandboxID: string): Promise<void> {
    const dir = this.dir('unified', sandboxID);
    let killed = true;
    try {
      setValue(join(dir, 'cgroup.kill'), 1);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw e;
      killed = false;
    }
    if (killed) await this.waitEvent(dir, 'populated', 0);
    await Promise.all(this.dirs(sandboxID).map(removeCgroupDir));
  }

  /**
   * Removes the per-node parents (after every sandbox is gone); create() brings them back.
   * Waits like destroy() while the kernel releases the last child, and returns what stayed
   * (a v1 memory parent was once left behind while its siblings went: a swallowed EBUSY).
   */
  async removeParents(): Promise<string[]> {
    const left = await Promise.all(
      this.parentDirs().map((d) =>
        removeCgroupDir(d).then(
          () => undefined,
          (e: unknown) => (e as Error).message,
        ),
      ),
    );
    return left.filter((m): m is string => m !== undefined);
  }

  async readValue(h: Hierarchy, sandboxID: string, file: string): Promise<string> {
    return readFile(join(this.dir(h, sandboxID), file), 'utf8');
  }

  /**
   * CPU time of every sandbox under the node's parent, alive or gone (cgroup2 folds a removed
   * child's time into its parent), from the parent's cpu.stat: one small read per sample.
   * 0 while the parent is gone (a full cleanup removes it; it comes back with the next sandbox).
   */
  usageUsec(): number {
    try {
      return keyedValue(readFileSync(join(this.parents.unified, 'cpu.stat'), 'utf8'), 'usage_usec') ?? 0;
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') return 0;
      throw e;
    }
  }

  /** memory.oom_control's oom_kill counter, read synchronously so an exec can sample it as it starts. */
  oomKillsSync(sandboxID: string): number {
    try {
      return keyedValue(readFileSync(join(this.dir('memory', sandboxID), 'memory.oom_control'), 'utf8'), 'oom_kill') ?? 0;
    } catch {
      return 0;
    }
  }

  /**
   * Waits until cgroup.events says `key want`. The kernel notifies changes of that file through
   * inotify, so a watcher wakes us at once; a slow poll covers a missed notification.
   */
  private async waitEvent(dir: string, key: string, want: number, timeoutMs = 10_000): Promise<void> {
    const file = join(dir, 'cgroup.events');
    const reached = () => keyedValue(readFileSync(file, 'utf8'), key) === want;
    if (reached()) return;
    const ac = new AbortController();
    const changes = watch(file, { signal: ac.signal });
    const deadline = Date.now() + timeoutMs;
    try {
      const next = changes[Symbol.asyncIterator]();
      for (;;) {
        // next() starts (or re-arms) the watch, so it must come before the read: a change
        // between the read and a later start was missed and cost the 50 ms poll (p90 of destroy).
        const change = next.next();
        change.catch(() => {}); // rejects with AbortError when the watch is stopped below
        if (reached()) return;
        const left = deadline - Date.now();
        if (left <= 0) throw new CubeError('CGROUP_FAILED', `${dir}: ${key} did not become ${want} within ${timeoutMs} ms`);
        await Promise.race([change, sleep(Math.min(left, 50))]);
      }
    } finally {
      ac.abort();
    }
  }
}

/**
 * Writes a cgroup control file synchronously: the kernel answers these in microseconds (a fresh
 * cgroup's limits, cgroup.kill), and a promise write costs a file handle and three thread-pool
 * round trips: 210-230 us of CPU against 19-22 us for a write and a read of a memory cgroup's
 * files (3,000 pairs, load 8-15). mkdir and rmdir stay asynchronous: an rmdir took up to 12 ms.
 */
function setValue(file: string, value: number | string): void {
  writeFileSync(file, String(value));
}

/** rmdir that tolerates a missing dir and retries while the kernel still releases the last tasks. */
async function removeCgroupDir(dir: string): Promise<void> {
  for (let attempt = 0; ; attempt++) {
    try {
      await rmdir(dir);
      return;
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code;
      if (code === 'ENOENT') return;
      if (code !== 'EBUSY' || attempt >= 100) throw new CubeError('CGROUP_FAILED', `rmdir ${dir}: ${code}`, { cause: e });
      await sleep(10);
    }
  }
}
