// The runtime driver contract: what cubelet asks of a driver (ns today, microvm and sim later).
// Drivers own kernel objects for the sandbox's processes, root filesystem and cgroups;
// the network slot comes from the network-agent and is only joined here.
import type { Readable, Writable } from 'node:stream';
import { CubeError } from '../errors.js';
import type { LimitAsk } from '../model/limits.js';
import type { RuntimeInfo } from '../model/node.js';
import type { PauseOptions, SnapshotKeeps } from '../model/sandbox.js';
import type { StoreUsage } from '../storage/btrfs-store.js';

/** What a template sets for every sandbox made from it (from the image config or the build steps). */
export interface TemplateConfig {
  /** Environment every process of the sandbox starts with (under the create-time envVars). */
  env: Record<string, string>;
  /** Default working directory of commands ('' = the user's home). */
  workdir: string;
  /** Default user of commands and of the start command: 'root' or 'user'. */
  user: string;
  /** Run in the background at create (sh -c); the sandbox is running once readyCmd exits 0. */
  startCmd?: string;
  /** Polled (sh -c) until it exits 0, bounded by readyTimeoutSec; absent = running once the start command is launched. */
  readyCmd?: string;
  /** Absent: the config's sandbox.ready_timeout_sec. */
  readyTimeoutSec?: number;
  /** The runtime its sandboxes run on when the create names none (absent: the node's default); see TEMPLATE_RUNTIMES. */
  runtime?: TemplateRuntime;
}

/** Runtimes a template may name as its default (sim is a benchmark node's, not a template's). */
export const TEMPLATE_RUNTIMES = ['ns', 'microvm'] as const;
export type TemplateRuntime = (typeof TEMPLATE_RUNTIMES)[number];

/** A template's default runtime as given (import query, CLI option), checked (pure). */
export function templateRuntime(name: string): TemplateRuntime {
  const r = TEMPLATE_RUNTIMES.find((x) => x === name);
  if (!r) throw new CubeError('BAD_REQUEST', `runtime must be one of ${TEMPLATE_RUNTIMES.join(', ')} (got ${name})`);
  return r;
}

export interface TemplateRef {
  name: string;
  /** sha256 of the template's layers and config (absent for `host` and directory templates). */
  digest?: string;
  /** Read-only directories stacked as the overlay's lower layers, LOWEST first. */
  layers: string[];
  /** Host /usr is bind-mounted read-only at /usr (the `host` template). */
  bindHostUsr: boolean;
  config?: TemplateConfig;
}

export interface LaunchSpec {
  sandboxID: string;
  template: TemplateRef;
  cpus: number;
  memoryMiB: number;
  pidsMax: number;
  /** /run/netns/... of the pooled slot to join; absent = a fresh empty netns (tests only). */
  netnsPath?: string;
  /** Create-time environment: every exec inherits it (the E2B SDK's envVars). */
  env: Record<string, string>;
  /** Writable layer size, GiB: the ns runtime's quota-group limit (absent: the default spec's 10), the microvm runtime's disk size. */
  diskGiB?: number;
  /** The runtime to create it with, on a node that offers several (runtime/multi.ts); absent: the node's default. */
  runtime?: string;
  /** Root inside keeps CAP_NET_RAW (raw and packet sockets); off unless asked (metadata cube.net_raw=true). */
  netRaw?: boolean;
  /** Less than the node's shares, as the create's labels ask (model/limits.ts); absent: the node's. */
  limits?: LimitAsk;
  /** Start from this kept snapshot (its writable layer) instead of an empty one: only the driver that took it. */
  fromSnapshot?: string;
  /** Volumes to mount (a driver with `volumes`; others refuse them): by id, at an absolute path inside. */
  volumes?: { volumeID: string; path: string }[];
}

export interface SandboxHandle {
  sandboxID: string;
  /** Host pid of the sandbox's pid-1. */
  initPid: number;
  /** Per-sandbox directory (upper, work) under the data dir. */
  dir: string;
}

export interface ExecRequest {
  /** argv; argv[0] is looked up in the sandbox's PATH. */
  argv: string[];
  /** Added to the create-time env. */
  env?: Record<string, string>;
  /** Default: the user's home. */
  cwd?: string;
  /** 'root' or 'user' (uid 1000, home /home/user); default 'user'. */
  user?: string;
  /** Killed (SIGKILL) after this many ms; 0 = no limit. */
  timeoutMs?: number;
  /** Keep stdin open as a pipe (otherwise /dev/null). */
  stdin?: boolean;
  /** Run on a terminal of this size: output on stdout, stdin is the terminal's input. */
  pty?: { cols: number; rows: number };
}

export interface ExitInfo {
  exitCode: number;
  /** Set when the process died of a signal. */
  signal?: string;
  /** The sandbox's memory cgroup OOM-killed something while this ran. */
  oomKilled: boolean;
  timedOut: boolean;
}

export interface ExecProcess {
  /** Host pid of the helper that runs the command, -1 when unknown (not meaningful inside the sandbox). */
  pid: number;
  stdout: Readable;
  stderr: Readable;
  stdin: Writable | null;
  exited: Promise<ExitInfo>;
  kill(signal?: NodeJS.Signals): void;
  /** Resizes the terminal (only for a `pty` request). */
  resize?(cols: number, rows: number): void;
  /**
   * Stops reading stdout and stderr for `ms` (output nobody took): the command blocks on its full
   * pipe meanwhile, cubed holding a bounded amount of it; calls while stopped do not extend it; a
   * no-op once the command has exited, so its last output drains. Absent: the runtime cannot
   * (pausing the streams would only buffer what keeps coming).
   */
  pauseOutput?(ms: number): void;
}

export interface FileStat {
  name: string;
  /** Absolute path inside the sandbox. */
  path: string;
  type: 'file' | 'dir' | 'symlink' | 'other';
  size: number;
  mode: number;
  uid: number;
  gid: number;
  mtime: Date;
  /** Where the runtime reads them (ns): access and change times. */
  atime?: Date;
  ctime?: Date;
  symlinkTarget?: string;
}

/** How a file operation acts for its user: `permissions` true, only where the user's own process could. */
export interface FileAccess {
  permissions?: boolean;
}

/**
 * File access confined to the sandbox root: `..` and symlinks leading out are refused (130400).
 * `user` (default 'user') with `as.permissions` (the files API): the operation is refused (400
 * "Permission denied") where that user's own process inside the sandbox could not do it (read a
 * 0600 root file, list /root, remove a root file from a root directory or from /tmp); root, and
 * callers without `as.permissions` (template builds, as Docker's COPY), act anywhere.
 */
export interface SandboxFiles {
  stat(h: SandboxHandle, path: string, user?: string, as?: FileAccess): Promise<FileStat>;
  /** Below a directory the user may not read, a deeper listing lists nothing (as `ls -R` goes on past it). */
  list(h: SandboxHandle, path: string, depth?: number, user?: string, as?: FileAccess): Promise<FileStat[]>;
  read(h: SandboxHandle, path: string, user?: string, as?: FileAccess): Promise<Readable>;
  /**
   * Creates parent directories; owned by `user` (default 'user'); `mode` (default 0644, the ns
   * runtime's template builds set it) applies to the file. Without `as.permissions` (template
   * builds, as Docker's COPY) it writes anywhere and gives the files to `user`.
   */
  write(h: SandboxHandle, path: string, data: Readable | Buffer, user?: string, mode?: number, as?: FileAccess): Promise<FileStat>;
  mkdir(h: SandboxHandle, path: string, user?: string, as?: FileAccess): Promise<boolean>;
  remove(h: SandboxHandle, path: string, user?: string, as?: FileAccess): Promise<void>;
  /** Parent directories of `to` are made, owned by `user` with `as.permissions`, else by the moved file's owner. */
  move(h: SandboxHandle, from: string, to: string, user?: string, as?: FileAccess): Promise<FileStat>;
}

/** A change below a watched directory; `name` is relative to it. */
export interface FsChange {
  type: 'create' | 'write' | 'remove' | 'rename' | 'chmod';
  name: string;
}

/** envd's file metadata: the file's user.e2b.* extended attributes, prefix stripped. */
export type FileMetadata = Record<string, string>;

export interface WatchRequest {
  /** Absolute path of a directory inside the sandbox. */
  path: string;
  /** Subdirectories too (also those made later). */
  recursive: boolean;
  /** Whose view: the watch sees what this user may read. Default 'user'. */
  user?: string;
}

export interface SandboxStats {
  memoryBytes: number;
  memoryLimitBytes: number;
  cpuUsageNs: number;
  pids: number;
  oomKills: number;
  /** Page cache charged to the sandbox (part of memoryBytes), when the driver can tell. */
  memoryCacheBytes?: number;
  /** Bytes the sandbox's writable layer holds, when the driver can tell. */
  diskUsedBytes?: number;
}

/**
 * Where a runtime keeps one record per sandbox for the cubelet, by the sandbox's directory (the
 * cubelet's meta: meta.json there by default, the sim driver's in memory).
 */
/** The node agent's record of a sandbox (cubelet/meta.ts), in the runtime's per-sandbox directory, which the runtime removes. */
export const META_FILE = 'meta.json';

export interface DirRecords<T> {
  write(dir: string, value: T): Promise<void>;
  /** undefined when there is none (an incomplete create). */
  read(dir: string): Promise<T | undefined>;
}

export interface RuntimeDriver {
  readonly name: 'ns' | 'microvm' | 'sim';
  /** Checks prerequisites and prepares per-node parents (cgroup parents named cube-<nodeTag>). */
  init(): Promise<void>;
  create(spec: LaunchSpec): Promise<SandboxHandle>;
  /**
   * Kills every process, removes cgroups and the per-sandbox directory. Idempotent. Resolves only
   * once every process of the sandbox has exited: each one a driver starts in the sandbox's network
   * namespace joins the sandbox's cgroup before it enters the namespace (cube-launch create and
   * exec, QEMU), and the cgroup is killed and seen empty. The network slot's reuse relies on it.
   */
  destroy(sandboxID: string): Promise<void>;
  pause(h: SandboxHandle, opts?: PauseOptions): Promise<void>;
  /** Resumes either kind of pause (the driver knows which one holds the sandbox). */
  resume(h: SandboxHandle): Promise<void>;
  alive(h: SandboxHandle): boolean;
  /**
   * Whether the sandbox's own agent answers within `deadlineMs` (a microVM's guest agent, on its
   * channel): a running QEMU whose agent stays silent serves nothing, so the cubelet counts it as
   * dead (containerd trusts a shim only once it answers on its socket). Absent: the driver has no
   * agent to ask (an ns sandbox's init is the sandbox).
   */
  answers?(h: SandboxHandle, deadlineMs: number): Promise<boolean>;
  exec(h: SandboxHandle, req: ExecRequest): ExecProcess;
  stats(h: SandboxHandle): Promise<SandboxStats>;
  /**
   * Processes OOM-killed in the sandbox so far (a kernel counter: the memory cgroup's oom_kill),
   * what the cubelet polls every second: one small read, never a walk of the sandbox's files.
   */
  oomKills(h: SandboxHandle): Promise<number>;
  /** CPU time all of this node's sandboxes have used, microseconds, monotonic (the live cpu gate); absent when the driver cannot tell. */
  cpuUsageUsec?(): number | undefined;
  files: SandboxFiles;
  /**
   * Watches a directory with inotify inside the sandbox: resolves once the watch is set (changes
   * from then on are reported); ending the iteration removes it. Absent: the driver cannot.
   */
  watch?(h: SandboxHandle, req: WatchRequest): Promise<AsyncIterable<FsChange>>;
  /** The metadata of each of `paths` (empty for one that has none or cannot be read), as `user` sees it. Absent: the driver keeps none. */
  readMetadata?(h: SandboxHandle, paths: string[], user?: string): Promise<FileMetadata[]>;
  /** Replaces the metadata of `path` with `meta` (empty: removes it all). */
  writeMetadata?(h: SandboxHandle, path: string, meta: FileMetadata, user?: string): Promise<void>;
  /** Sandboxes this node's kernel objects still hold (for re-adoption after a restart). */
  scan(): Promise<SandboxHandle[]>;
  /** Removes every kernel object of this node that belongs to no sandbox in `keep`. */
  cleanup(keep: Set<string>): Promise<{ removed: string[] }>;
  /** The runtimes this driver offers (several for a RuntimeSet); absent: just `name`. */
  runtimes?(): RuntimeInfo[];
  /** The runtime a sandbox runs on (a RuntimeSet); absent: `name`. */
  runtimeOf?(sandboxID: string): string;
  /** Why a sandbox that is no longer alive() died, when the driver can tell (e.g. a VM's console tail). */
  deathReason?(h: SandboxHandle): string | undefined;
  /** The store of writable layers (src/storage/), for drivers that keep one. */
  storage?: SandboxStorage;
  /** Kept sandbox states (E2B snapshots), for drivers that keep them; absent: this runtime cannot snapshot. */
  sandboxSnapshots?: SandboxSnapshots;
  /** The node's volumes (ns: subvolumes of its store), for drivers that can mount them; absent: creates with volumes are refused. */
  volumes?: VolumeHost;
  /** At daemon stop, after cleanup: destroy = nothing of the node's store stays (unmounted, image deleted). */
  close?(opts: { destroy: boolean }): Promise<void>;
}

/**
 * Kept sandbox states by snapshot id. ns keeps the writable layer (a read-only btrfs snapshot);
 * a runtime that can also keep processes (microvm memory) says so in `keeps`.
 */
export interface SandboxSnapshots {
  /** Keeps the sandbox's state as `snapshotID`, and says what it kept; the caller has frozen the sandbox. 409 when its runtime cannot. */
  take(h: SandboxHandle, snapshotID: string): Promise<SnapshotKeeps>;
  /** Idempotent. */
  remove(snapshotID: string): Promise<void>;
  list(): Promise<string[]>;
}

/**
 * A node's volumes (E2B volumes): made, removed and read by id, their content through the same
 * confined walk as a sandbox's files (FileStat paths are inside the volume, `/` its root).
 */
export interface VolumeHost {
  /** Makes an empty volume limited to `sizeBytes`; 400 (VOLUME_TOO_LARGE) when the store has not that much free. */
  create(volumeID: string, sizeBytes: number): Promise<void>;
  /** Idempotent. */
  remove(volumeID: string): Promise<void>;
  /** Ids of the volumes the node holds. */
  ids(): Promise<string[]>;
  /** Bytes its data and metadata take (its quota group's exclusive count); undefined when unknown. */
  usedBytes(volumeID: string): Promise<number | undefined>;
  /** The host directory a driver mounts. */
  dir(volumeID: string): string;
  statPath(volumeID: string, path: string): Promise<FileStat>;
  listDir(volumeID: string, path: string, depth: number): Promise<FileStat[]>;
  readFile(volumeID: string, path: string): Promise<Readable>;
  writeFile(volumeID: string, path: string, data: Readable | Buffer, opts: VolumeWriteOptions): Promise<FileStat>;
  makeDir(volumeID: string, path: string, opts: VolumeWriteOptions): Promise<FileStat>;
  removePath(volumeID: string, path: string): Promise<void>;
  setMetadata(volumeID: string, path: string, meta: { uid?: number; gid?: number; mode?: number }): Promise<FileStat>;
}

/** E2B's volume write options: owner and mode of what is made; force: makeDir makes parents, writeFile overwrites. */
export interface VolumeWriteOptions {
  uid?: number;
  gid?: number;
  mode?: number;
  force?: boolean;
}

export interface SandboxStorage {
  usage(): Promise<StoreUsage>;
  /** Bytes each sandbox's writable layer holds on its own (quota-group exclusive), read without spawning. */
  diskUsed(sandboxIDs: Iterable<string>): Promise<Map<string, number>>;
  /** The sandbox's overlay upper dir. */
  upperDir(sandboxID: string): string;
  /** Makes `dest` (a new path on the store's filesystem) a tree of what the sandbox's upper dir holds, without copying data: what a template build step yields as a layer. */
  captureUpper(sandboxID: string, dest: string): Promise<void>;
}
