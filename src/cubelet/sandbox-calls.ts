// The sandboxes a node holds and the calls made inside a ready one: processes (E2B's envd process
// API) and files, each through the runtime driver as the sandbox's user; its snapshots; the
// runtimes it offers. The Cubelet extends it with the lifecycle (create, pause, resume, destroy),
// warm pools, timers and node views.
import type { Readable } from 'node:stream';
import { CubeError, isCubeError } from '../errors.js';
import type { EventKind, EventView } from '../model/event.js';
import type { SandboxState, SandboxView, SnapshotKeeps } from '../model/sandbox.js';
import type { NetSlot } from '../network/types.js';
import type { FileAccess, FileMetadata, FileStat, FsChange, RuntimeDriver, SandboxHandle, SandboxStats, WatchRequest } from '../runtime/types.js';
import { runtimeIdOf, type MetaKeeper, type SandboxMeta } from './meta.js';
import type { OutputLine } from './output-log.js';
import { ProcessTable } from './process-table.js';
import { assertOp, type SandboxOp } from './state-machine.js';
import type { NodeCreateRequest, NodeSnapshot, ProcessInfo, ProcessStream, StartProcessRequest } from './types.js';
import type { CpuReading } from './usage.js';

/** A sandbox of the node, as the cubelet holds it. */
export interface Entry {
  view: SandboxView;
  meta: SandboxMeta;
  handle?: SandboxHandle;
  slot?: NetSlot;
  procs: ProcessTable;
  timer?: NodeJS.Timeout;
  /** The operation in progress (create, pause, resume, destroy, snapshot); destroy waits for it. */
  op?: Promise<unknown>;
  /** A snapshot in progress: a pause or resume waits for it (it freezes and thaws on its own). */
  snapshotting?: Promise<unknown>;
  oomKills: number;
  /** When the liveness watch last asked its agent (epoch ms; drivers with agents only). */
  probedAt?: number;
  /** The last CPU reading taken for sandboxUsage(): the next one's CPU share is measured from it. */
  cpuReading?: CpuReading;
}

/**
 * The files API acts for its user (default 'user'): where that user's own process inside the
 * sandbox could not read, list, write, remove or move, neither can the call (issue 30 item 5).
 */
const AS_USER: FileAccess = { permissions: true };

export abstract class SandboxCalls {
  protected readonly entries = new Map<string, Entry>();

  constructor(
    readonly nodeID: string,
    protected readonly driver: RuntimeDriver,
    protected readonly meta: MetaKeeper,
  ) {}

  protected newEntry(meta: SandboxMeta, state: SandboxState): Entry {
    const id = meta.sandboxID;
    const view = this.viewOf(meta, state);
    const entry: Entry = {
      view,
      meta,
      procs: new ProcessTable(id, (info, exit) => {
        // oomKilled says the sandbox's memory cgroup killed something while this ran: the process
        // itself only if it died of SIGKILL (an `echo` that exited 0 during a storm was reported killed).
        const who = `process ${info.pid} (${info.argv[0] ?? '?'})`;
        if (exit.oomKilled) this.noteOom(entry, exit.signal === 'SIGKILL' ? `${who} was OOM-killed` : `a process was OOM-killed while ${who} ran`);
      }),
      oomKills: 0,
    };
    return entry;
  }

  /** Runs `run` as the entry's operation in progress (a destroy waits for it). */
  protected async asOp<T>(entry: Entry, run: Promise<T>): Promise<T> {
    entry.op = run;
    try {
      return await run;
    } finally {
      entry.op = undefined;
    }
  }

  /** A sandbox's view as its meta gives it (also a warm sandbox's new one when a create claims it). */
  protected viewOf(meta: SandboxMeta, state: SandboxState): SandboxView {
    return {
      sandboxID: meta.sandboxID,
      templateID: meta.templateID,
      nodeID: this.nodeID,
      state,
      spec: { ...meta.spec },
      metadata: { ...meta.metadata },
      startedAt: meta.startedAt,
      endAt: meta.endAt,
      runtime: meta.runtime ?? this.driver.runtimeOf?.(runtimeIdOf(meta)) ?? this.driver.name,
      ...(meta.lifecycle ? { lifecycle: { ...meta.lifecycle } } : {}),
      ...(meta.owner !== undefined ? { owner: meta.owner } : {}),
      ...(meta.egressAsked ? { egress: { ...meta.egressAsked } } : {}),
      ...(meta.volumes ? { volumes: meta.volumes.map((v) => ({ ...v })) } : {}),
    };
  }

  /** Notes an OOM kill in the sandbox (its view's reason and an event). */
  protected abstract noteOom(entry: Entry, message: string): void;

  /** A node event (the cubelet's listeners). */
  protected abstract emitEvent(kind: EventKind, message: string, extra?: Partial<Omit<EventView, 'id' | 'at' | 'kind' | 'message'>>): void;

  protected get(sandboxID: string): Entry {
    const e = this.entries.get(sandboxID);
    if (!e) throw new CubeError('NOT_FOUND', `sandbox ${sandboxID} not found on node ${this.nodeID}`);
    return e;
  }

  protected ready(sandboxID: string, op: SandboxOp): Entry {
    const e = this.get(sandboxID);
    assertOp(sandboxID, e.view.state, op);
    return e;
  }

  async startProcess(sandboxID: string, req: StartProcessRequest): Promise<ProcessStream> {
    const entry = this.ready(sandboxID, 'exec');
    try {
      return this.spawnIn(entry, req.cwd === undefined && entry.meta.workdir ? { ...req, cwd: entry.meta.workdir } : req);
    } catch (e) {
      throw isCubeError(e) ? e : new CubeError('EXEC_FAILED', `exec in ${sandboxID}: ${(e as Error).message}`, { cause: e });
    }
  }

  protected spawnIn(entry: Entry, req: StartProcessRequest): ProcessStream {
    return entry.procs.start(req, (r) => this.driver.exec(entry.handle!, { ...r, env: { ...entry.meta.env, ...(r.env ?? {}) } }));
  }

  async connectProcess(sandboxID: string, sel: { pid?: number; tag?: string }): Promise<ProcessStream> {
    return this.get(sandboxID).procs.connect(sel);
  }

  async listProcesses(sandboxID: string): Promise<ProcessInfo[]> {
    return this.get(sandboxID).procs.list();
  }

  async sendInput(sandboxID: string, pid: number, data: Buffer): Promise<void> {
    this.get(sandboxID).procs.sendInput(pid, data);
  }

  async closeStdin(sandboxID: string, pid: number): Promise<void> {
    this.get(sandboxID).procs.closeStdin(pid);
  }

  async signalProcess(sandboxID: string, pid: number, signal: 'SIGKILL' | 'SIGTERM' | 'SIGINT'): Promise<void> {
    this.get(sandboxID).procs.signal(pid, signal);
  }

  async resizeProcess(sandboxID: string, pid: number, cols: number, rows: number): Promise<void> {
    this.get(sandboxID).procs.resize(pid, cols, rows);
  }

  async statFile(sandboxID: string, path: string, user?: string): Promise<FileStat> {
    return this.driver.files.stat(this.ready(sandboxID, 'files').handle!, path, user, AS_USER);
  }

  async listDir(sandboxID: string, path: string, depth?: number, user?: string): Promise<FileStat[]> {
    return this.driver.files.list(this.ready(sandboxID, 'files').handle!, path, depth, user, AS_USER);
  }

  async readMetadata(sandboxID: string, paths: string[], user?: string): Promise<FileMetadata[]> {
    const entry = this.ready(sandboxID, 'files');
    // Only a sandbox whose files were given metadata pays for reading it (a helper job per call).
    if (!entry.meta.fileMetadata || !this.driver.readMetadata) return paths.map(() => ({}));
    return this.driver.readMetadata(entry.handle!, paths, user);
  }

  async writeMetadata(sandboxID: string, path: string, meta: FileMetadata, user?: string): Promise<void> {
    const entry = this.ready(sandboxID, 'files');
    const none = Object.keys(meta).length === 0;
    if (none && !entry.meta.fileMetadata) return; // nothing was ever set: nothing to clear
    if (!this.driver.writeMetadata) throw new CubeError('BAD_REQUEST', `the ${this.driver.name} runtime keeps no file metadata`);
    if (!entry.meta.fileMetadata) {
      entry.meta.fileMetadata = true;
      await this.meta.write(entry.handle!.dir, entry.meta);
    }
    await this.driver.writeMetadata(entry.handle!, path, meta, user);
  }

  async processOutput(sandboxID: string): Promise<OutputLine[]> {
    return this.get(sandboxID).procs.output.lines();
  }

  async watchDir(sandboxID: string, req: WatchRequest): Promise<AsyncIterable<FsChange>> {
    if (!this.driver.watch) throw new CubeError('BAD_REQUEST', `the ${this.driver.name} runtime cannot watch directories`);
    return this.driver.watch(this.ready(sandboxID, 'files').handle!, req);
  }

  async readFile(sandboxID: string, path: string, user?: string): Promise<Readable> {
    return this.driver.files.read(this.ready(sandboxID, 'files').handle!, path, user, AS_USER);
  }

  async writeFile(sandboxID: string, path: string, data: Readable | Buffer, user?: string): Promise<FileStat> {
    return this.driver.files.write(this.ready(sandboxID, 'files').handle!, path, data, user, undefined, AS_USER);
  }

  async makeDir(sandboxID: string, path: string, user?: string): Promise<boolean> {
    return this.driver.files.mkdir(this.ready(sandboxID, 'files').handle!, path, user, AS_USER);
  }

  async removePath(sandboxID: string, path: string, user?: string): Promise<void> {
    return this.driver.files.remove(this.ready(sandboxID, 'files').handle!, path, user, AS_USER);
  }

  async movePath(sandboxID: string, from: string, to: string, user?: string): Promise<FileStat> {
    return this.driver.files.move(this.ready(sandboxID, 'files').handle!, from, to, user, AS_USER);
  }

  async sandboxStats(sandboxID: string): Promise<SandboxStats> {
    const e = this.get(sandboxID);
    if (!e.handle) throw new CubeError('SANDBOX_BUSY', `sandbox ${sandboxID} is ${e.view.state}`, { retryAfter: 1 });
    return this.driver.stats(e.handle);
  }

  /**
   * The runtime a create asks for: its `runtime`, else the metadata label `cube.runtime` (how an
   * E2B client chooses), else undefined: the template's default (runCreate), else the node's.
   * 400 when the node does not offer it.
   */
  protected runtimeFor(req: NodeCreateRequest): string | undefined {
    const asked = req.runtime ?? req.metadata['cube.runtime'];
    return asked === undefined ? undefined : this.offered(asked, `runtime '${asked}'`);
  }

  protected offers(runtime: string): boolean {
    return (this.driver.runtimes?.().map((r) => r.name) ?? [this.driver.name]).includes(runtime);
  }

  protected offered(runtime: string, what: string): string {
    const offered = this.driver.runtimes?.().map((r) => r.name) ?? [this.driver.name];
    if (!offered.includes(runtime)) throw new CubeError('BAD_REQUEST', `${what} is not offered by node ${this.nodeID} (it offers ${offered.join(', ')})`);
    return runtime;
  }

  async snapshotSandbox(sandboxID: string, snapshotID: string): Promise<NodeSnapshot> {
    const keeper = this.snapshotKeeper();
    const entry = this.ready(sandboxID, 'snapshot');
    if (entry.op) throw new CubeError('SANDBOX_BUSY', `snapshot ${sandboxID}: another operation is in progress`, { retryAfter: 1 });
    const t0 = performance.now();
    // Frozen while the layer is taken, so no process is caught half way through a write sequence;
    // a paused sandbox is frozen already and stays paused.
    const run = (async () => {
      const freeze = entry.view.state === 'running';
      if (freeze) await this.driver.pause(entry.handle!);
      try {
        return await keeper.take(entry.handle!, snapshotID);
      } finally {
        if (freeze) await this.driver.resume(entry.handle!);
      }
    })();
    entry.op = entry.snapshotting = run;
    let keeps: SnapshotKeeps;
    try {
      keeps = await run;
    } finally {
      entry.op = entry.snapshotting = undefined;
    }
    const { meta, view } = entry;
    this.emitEvent('sandbox.snapshot', `snapshot ${snapshotID} taken (${keeps})`, { sandboxID, durationMs: Math.round(performance.now() - t0) });
    return {
      snapshotID,
      sandboxID,
      nodeID: this.nodeID,
      templateID: meta.templateID,
      runtime: view.runtime,
      keeps,
      spec: { ...meta.spec },
      metadata: { ...meta.metadata },
      env: { ...meta.env },
      createdAt: Date.now(),
    };
  }

  async deleteSnapshot(snapshotID: string): Promise<void> {
    await this.driver.sandboxSnapshots?.remove(snapshotID);
  }

  async listSnapshots(): Promise<string[]> {
    return (await this.driver.sandboxSnapshots?.list()) ?? [];
  }

  protected snapshotKeeper(): NonNullable<RuntimeDriver['sandboxSnapshots']> {
    const keeper = this.driver.sandboxSnapshots;
    if (!keeper) throw new CubeError('CONFLICT', `node ${this.nodeID} runs ${this.driver.name}, which keeps no snapshots`);
    return keeper;
  }

  async getSandbox(sandboxID: string): Promise<SandboxView | undefined> {
    const e = this.entries.get(sandboxID);
    return e && !e.meta.warm ? { ...e.view } : undefined;
  }

  /** Users' sandboxes (warm ones are the node's: its view counts them apart). */
  async listSandboxes(): Promise<SandboxView[]> {
    return this.real().map((e) => ({ ...e.view }));
  }

  protected real(): Entry[] {
    return [...this.entries.values()].filter((e) => !e.meta.warm);
  }

  async sandboxAddress(sandboxID: string): Promise<string> {
    const ip = this.get(sandboxID).view.ip;
    if (!ip) throw new CubeError('CONFLICT', `sandbox ${sandboxID} has no address yet`);
    return ip;
  }
}
