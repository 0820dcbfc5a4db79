// The `ns` runtime driver: a sandbox is a process tree in its own pid, mount, uts, ipc, cgroup and
// net namespaces, pivoted into an overlayfs root, limited by per-sandbox cgroups. Creates go to the
// long-lived `cube-launch serve` helper (native/launch/serve.c, ./helper.ts), which forks the
// sandbox; its init stays, nothing supervises it from the host.
import { accessSync, constants as fsConstants, readFileSync } from 'node:fs';
import { chmod, mkdir, readFile, readdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import type { Logger } from 'pino';
import { CubeError, toCubeError } from '../../errors.js';
import { removeKnownDir } from '../../fsx.js';
import { isSandboxID } from '../../ids.js';
import { DEFAULT_SANDBOX_LIMITS, ioLimitsFor, type NodeSandboxLimits } from '../../model/limits.js';
import type { RuntimeInfo } from '../../model/node.js';
import { envVarsProblem } from '../../model/env.js';
import { BtrfsStore } from '../../storage/btrfs-store.js';
import { NsVolumes, volumeArgs, volumeMountError } from './volumes.js';
import { DEFAULT_PATH, etcHosts, sandboxUser } from '../../templates/store.js';
import {
  META_FILE,
  type ExecProcess,
  type ExecRequest,
  type ExitInfo,
  type FileMetadata,
  type FsChange,
  type LaunchSpec,
  type RuntimeDriver,
  type SandboxHandle,
  type SandboxSnapshots,
  type SandboxStats,
  type WatchRequest,
} from '../types.js';
import { Cgroups, keyedValue } from './cgroups.js';
import { fileLimits, hostTables, nodeParentLimits, type HostTables } from './host-limits.js';
import { NsFiles, type AccessCheck } from './files.js';
import { LaunchHelper, sharedHelper, type HelperExecJob } from './helper.js';
import { DEFAULT_IDENTITY, HostIdRanges } from './ids.js';
import { lowerArgs } from './lowerdir.js';
import { metadataJob, parseMetadata } from './metadata.js';
import { changesOf } from './watch.js';

/** The driver's record of a sandbox (template, env, id range), beside the node agent's META_FILE. */
const RECORD_FILE = 'sandbox.json';
const SANDBOX_FILES = [RECORD_FILE, META_FILE];

export interface NsDriverOptions {
  dataDir: string;
  nodeTag: string;
  log?: Logger;
  /** Default: build/cube-launch of this package (npm run build:native). */
  launcherPath?: string;
  /** The store's loop image size when the data dir is not on btrfs (cubelet storage.image_gib; 0 = auto). */
  storeImageGiB?: number;
  /** The node's declared memory (cubelet quota.memory_mib): the limit of all its sandboxes together. */
  nodeMemoryMiB?: number;
  /** cubelet identity.*: each sandbox's own host ids (./ids.ts); default: on, ranges from host id 1,000,000. */
  identity?: { userns: boolean; hostIdBase: number; hostIdRanges: number };
  /** cubelet identity.allow_net_raw: whether a create may ask for CAP_NET_RAW (and so the host's ids); default: no. */
  allowNetRaw?: boolean;
  /** cubelet sandbox_limits: each sandbox's shares (default: DEFAULT_SANDBOX_LIMITS). */
  sandboxLimits?: NodeSandboxLimits;
}

/** What a sandbox's exec needs after a daemon restart: kept next to its upper dir. */
interface SandboxRecord {
  template: string;
  env: Record<string, string>;
  netRaw?: boolean;
  /** RLIMIT_NOFILE of its commands (fileLimits); records of older versions have none. */
  nofile?: number;
  /** The first of its own host ids (its user namespace maps 0-65535 there); none: the host's ids. */
  idBase?: number;
}

/** How long an exited command's output may still drain (background children can hold the pipes). */
const DRAIN_MS = 200;

/**
 * ExecProcess.pauseOutput of a helper job: its streams are flow-controlled (helper.ts,
 * OUTPUT_WINDOW), so a pause holds at most the window in cubed; the command's exit (its EXIT frame)
 * resumes them for good, so what is left drains within DRAIN_MS.
 */
function outputPauser(job: HelperExecJob): { pause(ms: number): void } {
  let exited = false;
  let timer: NodeJS.Timeout | undefined;
  const resume = () => {
    clearTimeout(timer);
    timer = undefined;
    job.stdout.resume();
    job.stderr.resume();
  };
  const end = () => {
    exited = true;
    if (timer) resume();
  };
  job.exited.then(end, end);
  return {
    pause(ms) {
      if (exited || timer) return;
      job.stdout.pause();
      job.stderr.pause();
      timer = setTimeout(resume, ms);
      timer.unref();
    },
  };
}
const GIB = 1024 ** 3;
/** A LaunchSpec without diskGiB gets the default spec's. */
const DEFAULT_DISK_GIB = 10;

export class NsDriver implements RuntimeDriver {
  readonly name = 'ns' as const;
  readonly files = new NsFiles(
    (h) => this.alive(h),
    (h) => this.records.get(h.sandboxID)?.idBase,
    (h, user, checks) => this.mayAccess(h, user, checks),
  );
  /** Undefined when sandboxes share the host's ids (identity.userns false). The microvm driver of the node takes its QEMUs' ids from these too. */
  readonly ids: HostIdRanges | undefined;
  private readonly sandboxesDir: string;
  private readonly helper: LaunchHelper;
  private readonly launcher: string;
  private readonly log: Logger | undefined;
  private cgroupsOrUndefined?: Cgroups;
  private tables: HostTables = { pidMax: 0, threadsMax: 0, fileMax: 0, nofileHard: 0 };
  /** The sandbox store's block devices, where its sandboxes' I/O is limited. */
  private storeDevices: string[] = [];
  private readonly records = new Map<string, SandboxRecord>();
  /** Writable layers: one btrfs subvolume per sandbox, limited to its disk size. */
  readonly storage: BtrfsStore;
  /** E2B volumes: subvolumes of the store, mounted idmapped at create (volumes.ts). */
  readonly volumes: NsVolumes;
  /** A snapshot keeps the writable layer only: processes and memory are not kept (a new sandbox boots its init). */
  readonly sandboxSnapshots: SandboxSnapshots = {
    take: async (h, snapshotID) => {
      await this.storage.keep(h.sandboxID, snapshotID);
      return 'filesystem';
    },
    remove: (snapshotID) => this.storage.drop(snapshotID),
    list: () => this.storage.kept(),
  };

  constructor(private readonly opts: NsDriverOptions) {
    this.sandboxesDir = join(opts.dataDir, 'sandboxes');
    this.helper = opts.launcherPath ? new LaunchHelper(opts.launcherPath) : sharedHelper();
    this.launcher = this.helper.path;
    this.log = opts.log?.child({ component: 'runtime-ns' });
    const identity = opts.identity ?? DEFAULT_IDENTITY;
    this.ids = identity.userns ? new HostIdRanges(identity.hostIdBase, identity.hostIdRanges) : undefined;
    this.storage = new BtrfsStore({ dataDir: opts.dataDir, helper: this.helper, imageGiB: opts.storeImageGiB ?? 0, ...(opts.log ? { log: opts.log } : {}) });
    this.volumes = new NsVolumes(this.storage);
  }

  private get cgroups(): Cgroups {
    if (!this.cgroupsOrUndefined) throw new CubeError('INTERNAL', 'ns driver used before init()');
    return this.cgroupsOrUndefined;
  }

  async init(): Promise<void> {
    try {
      accessSync(this.launcher, fsConstants.X_OK);
    } catch {
      throw new CubeError('INTERNAL', `launcher ${this.launcher} is missing: build it with 'npm run build:native'`);
    }
    await this.ids?.checkHost();
    const tables = (this.tables = await hostTables(this.log));
    this.cgroupsOrUndefined = new Cgroups(this.opts.nodeTag);
    await this.cgroups.init(nodeParentLimits(tables, this.opts.nodeMemoryMiB));
    // 0700: what root inside makes (setuid files, secrets) is nobody's on the host but root's.
    await mkdir(this.sandboxesDir, { recursive: true, mode: 0o700 });
    await chmod(this.sandboxesDir, 0o700);
    await this.storage.open();
    this.storeDevices = await this.storage.devices();
  }

  async close(opts: { destroy: boolean }): Promise<void> {
    await this.storage.close(opts);
  }

  private dir(sandboxID: string): string {
    return join(this.sandboxesDir, sandboxID);
  }

  async create(spec: LaunchSpec): Promise<SandboxHandle> {
    const id = spec.sandboxID;
    if (!isSandboxID(id)) throw new CubeError('BAD_REQUEST', `invalid sandbox id '${id}'`);
    if (!(spec.memoryMiB > 0 && spec.cpus > 0 && spec.pidsMax > 0)) {
      throw new CubeError('BAD_REQUEST', `cpus, memoryMiB and pidsMax must be positive (got ${spec.cpus}, ${spec.memoryMiB}, ${spec.pidsMax})`);
    }
    // Refused unless the node allows it: it gives up the sandbox's own ids (below).
    if (spec.netRaw && !this.opts.allowNetRaw)
      throw new CubeError('NET_RAW_FORBIDDEN', 'cube.net_raw=true: this node does not allow raw sockets (cubelet identity.allow_net_raw is false)');
    const limits = this.opts.sandboxLimits ?? DEFAULT_SANDBOX_LIMITS;
    const files = fileLimits(this.tables.fileMax, limits.openFilesShare, spec.pidsMax, this.tables.nofileHard, spec.limits?.openFiles);
    if (typeof files === 'string') throw new CubeError('BAD_REQUEST', files);
    const io = ioLimitsFor(limits.io, spec.limits?.io);
    if (typeof io === 'string') throw new CubeError('BAD_REQUEST', io);
    const dir = this.dir(id);
    // NET_RAW needs root of the host's user namespace, which owns the slot's network namespace.
    const idBase = spec.netRaw ? undefined : this.ids?.take();
    try {
      await mkdir(dir, { mode: 0o700 });
    } catch (e) {
      if (idBase !== undefined) this.ids?.release(idBase);
      if ((e as NodeJS.ErrnoException).code === 'EEXIST') throw new CubeError('CONFLICT', `sandbox ${id} already exists on this node`);
      throw toCubeError(e, 'CREATE_FAILED');
    }
    const record: SandboxRecord = {
      template: spec.template.name,
      env: spec.env,
      ...(spec.netRaw ? { netRaw: true } : {}),
      nofile: files.nofile,
      ...(idBase !== undefined ? { idBase } : {}),
    };
    // Known before the create ends: remove() returns its id range, whatever step fails.
    this.records.set(id, record);
    // upper/ and work/ in the sandbox's subvolume (its disk limit); the records stay in `dir`,
    // outside the limit, so a full sandbox can still be paused or have its timeout changed. The
    // overlay is mounted on `dir` itself, in the sandbox's own mount namespace only (the host sees
    // the records there): a `merged/` mountpoint cost a mkdir and an rmdir per sandbox, and on an
    // ext4 without a journal (these machines' root) each inode allocation steps over every inode
    // freed in the last 30 s (ext4 recently_deleted: 3.6% of the machine in a create-delete loop
    // at 72/s, perf), so the fewer the per-sandbox inodes the better.
    const layer = this.storage.dir(id);
    try {
      this.storage.assertRoom();
      await Promise.all([
        // Written straight into the upper layer, so the sandbox's hostname resolves.
        (spec.fromSnapshot === undefined ? this.storage.take(id) : this.storage.takeFrom(spec.fromSnapshot, id))
          .then(() => mkdir(join(this.storage.upperDir(id), 'etc'), { recursive: true }))
          .then(() => writeFile(join(this.storage.upperDir(id), 'etc', 'hosts'), etcHosts(id))),
        writeFile(join(dir, RECORD_FILE), JSON.stringify(record)),
        this.cgroups.create(id, { ...spec, pidsMax: files.pidsMax, io: { devices: this.storeDevices, limits: io } }),
      ]);
      const args = [
        '-i',
        id,
        ...lowerArgs(spec.template.layers, this.storage.upperDir(id), join(layer, 'work')),
        '-u',
        this.storage.upperDir(id),
        '-w',
        join(layer, 'work'),
        '-m',
        dir,
      ];
      args.push('-t', String(spec.memoryMiB));
      args.push('-q', String(Math.floor((spec.diskGiB ?? DEFAULT_DISK_GIB) * GIB)));
      if (spec.template.bindHostUsr) args.push('-U');
      if (spec.netnsPath) args.push('-n', spec.netnsPath);
      if (idBase !== undefined) args.push('-I', String(idBase));
      args.push(...volumeArgs(spec.volumes ?? [], (v) => this.volumes.dir(v)));
      for (const f of this.cgroups.procsFiles(id)) args.push('-c', f);
      const r = await this.helper.create(args);
      const initPid = Number(r.stdout.trim());
      if (r.exitCode !== 0 || !Number.isInteger(initPid) || initPid <= 0) {
        throw volumeMountError(r.stderr) ?? new CubeError('CREATE_FAILED', `sandbox ${id}: ${r.stderr.trim() || `launcher exited ${r.exitCode}`}`);
      }
      if (spec.fromSnapshot !== undefined) this.storage.refillClones(spec.fromSnapshot);
      this.log?.debug({ sandboxID: id, initPid }, 'sandbox created');
      return { sandboxID: id, initPid, dir };
    } catch (e) {
      await this.remove(id).catch((d: unknown) => this.log?.error({ sandboxID: id, err: d }, 'cleanup after failed create failed'));
      throw toCubeError(e, 'CREATE_FAILED');
    }
  }

  async destroy(sandboxID: string): Promise<void> {
    if (!isSandboxID(sandboxID)) throw new CubeError('BAD_REQUEST', `invalid sandbox id '${sandboxID}'`);
    await this.remove(sandboxID);
  }

  /** Kills, removes cgroups, the subvolume (a delete, no walk of its files) and the directory of any name found under this node's parents. */
  private async remove(sandboxID: string): Promise<void> {
    try {
      await this.cgroups.destroy(sandboxID);
      // merged/: the overlay's mountpoint of sandboxes an older version made.
      await Promise.all([this.storage.remove(sandboxID), removeKnownDir(this.dir(sandboxID), SANDBOX_FILES, ['merged'])]);
      // Its processes are gone with its cgroups: the range can be another sandbox's.
      const idBase = this.records.get(sandboxID)?.idBase;
      if (idBase !== undefined) this.ids?.release(idBase);
      this.records.delete(sandboxID);
    } catch (e) {
      throw toCubeError(e, 'DESTROY_FAILED');
    }
  }

  async pause(h: SandboxHandle): Promise<void> {
    await this.cgroups.freeze(h.sandboxID, true).catch((e: unknown) => {
      throw toCubeError(e, 'PAUSE_FAILED');
    });
  }

  async resume(h: SandboxHandle): Promise<void> {
    await this.cgroups.freeze(h.sandboxID, false).catch((e: unknown) => {
      throw toCubeError(e, 'RESUME_FAILED');
    });
  }

  /** What placement reads: whether a create may ask for raw sockets here (NodeView.runtimes). */
  runtimes(): RuntimeInfo[] {
    return [{ name: this.name, ...(this.opts.allowNetRaw ? { netRaw: true } : {}) }];
  }

  alive(h: SandboxHandle): boolean {
    try {
      const comm = readFileSync(`/proc/${h.initPid}/comm`, 'utf8');
      const cgroup = readFileSync(`/proc/${h.initPid}/cgroup`, 'utf8');
      return comm === 'cube-init\n' && cgroup.includes(`/cube-${this.opts.nodeTag}/${h.sandboxID}\n`);
    } catch {
      return false;
    }
  }

  exec(h: SandboxHandle, req: ExecRequest): ExecProcess {
    if (!req.argv.length || req.argv.some((a) => typeof a !== 'string' || a.includes('\0'))) {
      throw new CubeError('BAD_REQUEST', 'exec needs a non-empty argv of strings without NUL');
    }
    if (!this.alive(h)) throw new CubeError('NOT_FOUND', `sandbox ${h.sandboxID} is not running`);
    const badEnv = envVarsProblem(req.env, 'exec env');
    if (badEnv !== undefined) throw new CubeError('BAD_REQUEST', badEnv);
    const userName = req.user ?? 'user';
    const user = sandboxUser(userName);
    const record = this.records.get(h.sandboxID);
    const env: Record<string, string> = {
      PATH: DEFAULT_PATH,
      HOME: user.home,
      USER: userName,
      LOGNAME: userName,
      ...record?.env,
      ...req.env,
    };
    if (req.pty) {
      const { cols, rows } = req.pty;
      if (![cols, rows].every((n) => Number.isInteger(n) && n > 0 && n < 65536))
        throw new CubeError('BAD_REQUEST', `pty size must be whole numbers 1-65535 (got ${cols}x${rows})`);
      env['TERM'] ??= 'xterm-256color';
      env['LANG'] ??= 'C.UTF-8';
    }
    const args = ['-p', String(h.initPid), '-u', String(user.uid), '-g', String(user.gid), ...this.sandboxArgs(h), '-d', req.cwd ?? user.home];
    if (record?.netRaw) args.push('-R');
    if (record?.nofile) args.push('-N', String(record.nofile));
    for (const f of this.cgroups.procsFiles(h.sandboxID)) args.push('-c', f);
    args.push('--', ...req.argv);

    const oomBefore = this.cgroups.oomKillsSync(h.sandboxID);
    // A child of the long-lived helper runs it (a spawn from here would fork the whole daemon).
    const job = this.helper.exec(args, { env, stdin: req.stdin === true, ...(req.pty ? { pty: req.pty } : {}) });
    const pauser = outputPauser(job);
    let timedOut = false;
    const timer = req.timeoutMs
      ? setTimeout(() => {
          timedOut = true;
          job.signal('SIGKILL');
        }, req.timeoutMs)
      : undefined;
    const exited = job.exited.then(
      async (end): Promise<ExitInfo> => {
        clearTimeout(timer);
        let drain: NodeJS.Timeout | undefined;
        await Promise.race([job.closed, new Promise<void>((resolve) => (drain = setTimeout(resolve, DRAIN_MS)))]);
        clearTimeout(drain);
        job.detach();
        return { ...end, oomKilled: this.cgroups.oomKillsSync(h.sandboxID) > oomBefore, timedOut };
      },
      (e: unknown) => {
        clearTimeout(timer);
        throw new CubeError('EXEC_FAILED', `exec in ${h.sandboxID}: ${(e as Error).message}`, { cause: e });
      },
    );
    const stdin =
      req.stdin || req.pty
        ? new Writable({
            write: (chunk: Buffer, _enc, cb) => (job.write(chunk), cb()),
            final: (cb) => (job.closeStdin(), cb()),
          })
        : null;
    return {
      pid: -1,
      stdout: job.stdout,
      stderr: job.stderr,
      stdin,
      exited,
      kill: (signal: NodeJS.Signals = 'SIGKILL') => job.signal(signal),
      ...(req.pty ? { resize: (cols: number, rows: number) => job.resize(cols, rows) } : {}),
      pauseOutput: (ms) => pauser.pause(ms),
    };
  }

  async watch(h: SandboxHandle, req: WatchRequest): Promise<AsyncIterable<FsChange>> {
    if (!req.path.startsWith('/')) throw new CubeError('BAD_REQUEST', `watch needs an absolute path (got '${req.path}')`);
    return changesOf(this.builtin(h, '-W', [req.path], req.user, req.recursive ? ['-r'] : []), req.path);
  }

  async readMetadata(h: SandboxHandle, paths: string[], user?: string): Promise<FileMetadata[]> {
    if (paths.length === 0) return [];
    return parseMetadata(await metadataJob(this.builtin(h, '-X', ['get', ...paths], user), 'read file metadata'), paths.length);
  }

  async writeMetadata(h: SandboxHandle, path: string, meta: FileMetadata, user?: string): Promise<void> {
    await metadataJob(this.builtin(h, '-X', ['set', path, ...Object.entries(meta).flat()], user), `metadata of ${path}`);
  }

  /**
   * Whether `user` may reach each path inside `h` in its way (files.ts MAY bits), asked of the
   * kernel in the sandbox as the user: a CubeError naming the first refusal; the indexes of the
   * SOFT checks refused.
   */
  private async mayAccess(h: SandboxHandle, user: string, checks: AccessCheck[]): Promise<number[]> {
    const out = await metadataJob(
      this.builtin(
        h,
        '-A',
        checks.flatMap(([mode, path]) => [String(mode), path]),
        user,
      ),
      `as ${user}`,
    );
    return out.toString().split('\n').filter(Boolean).map(Number);
  }

  /** A job of the launch helper itself inside the sandbox (-W watch, -X metadata, -A access), as `user`, in its cgroups. */
  private builtin(h: SandboxHandle, mode: '-W' | '-X' | '-A', args: string[], userName?: string, extra: string[] = []) {
    if (!this.alive(h)) throw new CubeError('NOT_FOUND', `sandbox ${h.sandboxID} is not running`);
    if (args.some((a) => a.includes('\0'))) throw new CubeError('BAD_REQUEST', 'paths and metadata must not contain NUL');
    const user = sandboxUser(userName ?? 'user');
    const argv = [mode, ...extra, '-p', String(h.initPid), '-u', String(user.uid), '-g', String(user.gid), ...this.sandboxArgs(h)];
    // In the sandbox's cgroups: the helper's memory and pid count are the sandbox's.
    for (const f of this.cgroups.procsFiles(h.sandboxID)) argv.push('-c', f);
    return this.helper.exec([...argv, '--', ...args], { env: {}, stdin: false });
  }

  /**
   * `-I BASE` for a sandbox with its own host ids (its commands join its user namespace), and `-Q`
   * its writable layer, whose disk limit and use the helper answers statfs with.
   */
  private sandboxArgs(h: SandboxHandle): string[] {
    const idBase = this.records.get(h.sandboxID)?.idBase;
    return [...(idBase === undefined ? [] : ['-I', String(idBase)]), '-Q', this.storage.upperDir(h.sandboxID)];
  }

  async stats(h: SandboxHandle): Promise<SandboxStats> {
    const id = h.sandboxID;
    const [usage, limit, cpu, pids, oom, memStat, disk] = await Promise.all([
      this.cgroups.readValue('memory', id, 'memory.usage_in_bytes'),
      this.cgroups.readValue('memory', id, 'memory.limit_in_bytes'),
      this.cgroups.readValue('unified', id, 'cpu.stat'),
      this.cgroups.readValue('pids', id, 'pids.current'),
      this.cgroups.readValue('memory', id, 'memory.oom_control'),
      this.cgroups.readValue('memory', id, 'memory.stat'),
      this.storage.diskUsed([id]),
    ]).catch((e: unknown) => {
      throw new CubeError('NOT_FOUND', `sandbox ${id} has no cgroups on this node`, { cause: e });
    });
    return {
      memoryBytes: Number(usage),
      memoryLimitBytes: Number(limit),
      cpuUsageNs: (keyedValue(cpu, 'usage_usec') ?? 0) * 1000,
      pids: Number(pids),
      oomKills: keyedValue(oom, 'oom_kill') ?? 0,
      memoryCacheBytes: keyedValue(memStat, 'cache') ?? 0,
      // The quota group's figure, from the kernel: btrfs updates it at its next commit (up to
      // 30 s behind a write). It was a walk of the writable layer, and this path runs on timers
      // (E2B metrics every 5 s): 100,000 empty files in one sandbox took cubed from 1% to
      // 100-230% of a core, a 2,000-deep tree alone 69%.
      ...(disk.has(id) ? { diskUsedBytes: disk.get(id)! } : {}),
    };
  }

  async oomKills(h: SandboxHandle): Promise<number> {
    const oom = await this.cgroups.readValue('memory', h.sandboxID, 'memory.oom_control').catch((e: unknown) => {
      throw new CubeError('NOT_FOUND', `sandbox ${h.sandboxID} has no cgroups on this node`, { cause: e });
    });
    return keyedValue(oom, 'oom_kill') ?? 0;
  }

  cpuUsageUsec(): number | undefined {
    return this.cgroupsOrUndefined?.usageUsec();
  }

  async scan(): Promise<SandboxHandle[]> {
    const out: SandboxHandle[] = [];
    for (const id of await this.cgroups.list()) {
      if (!isSandboxID(id)) continue;
      for (const pid of await this.cgroups.pids(id)) {
        const h = { sandboxID: id, initPid: pid, dir: this.dir(id) };
        if (!this.alive(h)) continue;
        const record = await readFile(join(h.dir, RECORD_FILE), 'utf8').then(
          (t) => JSON.parse(t) as SandboxRecord,
          () => undefined,
        );
        if (!record) break; // half-created: cleanup() removes it
        if (record.idBase !== undefined && !this.ids?.adopt(record.idBase)) {
          this.log?.warn({ sandboxID: id, idBase: record.idBase }, "a running sandbox's host ids are outside the configured identity ranges");
        }
        this.records.set(id, record);
        out.push(h);
        break;
      }
    }
    return out;
  }

  async cleanup(keep: Set<string>): Promise<{ removed: string[] }> {
    const ids = await this.cgroups.list();
    for (const name of await readdir(this.sandboxesDir).catch(() => [] as string[])) ids.add(name);
    for (const name of await this.storage.list()) ids.add(name);
    const removed: string[] = [];
    for (const id of ids) {
      if (keep.has(id)) continue;
      await this.remove(id);
      removed.push(id);
    }
    if (!keep.size) {
      // Nothing of this node stays on the host: a parent that cannot go is said, not ignored.
      const left = await this.cgroups.removeParents();
      if (left.length) this.log?.warn({ left }, 'node cgroup parents stay');
    }
    if (removed.length) this.log?.info({ removed }, 'removed leftover sandboxes');
    return { removed };
  }
}
