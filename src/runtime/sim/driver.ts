// The `sim` runtime driver: a SIMULATION, for scheduler benchmarks and cluster tests at a scale
// this machine cannot hold (one process standing for many nodes). A simulated sandbox is an
// in-memory record: no process, namespace, cgroup or mount exists, exec runs a few simulated
// commands (exec.ts), files live in memory (files.ts), stats are computed, and so does the
// cubelet's meta of each sandbox (`meta`, kept as a copy as a file would be): its mkdir, write,
// rename and rm were a fifth of a 1000-node sim process's CPU per create (--cpu-prof of
// bench/cluster-sim.ts). Nothing survives the process: after a restart scan() finds no sandbox
// and cleanup() removes the directories older versions left behind. Never the default
// (cubelet.runtime = "sim" or --runtime sim).
import { mkdir, readdir, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { CubeError } from '../../errors.js';
import { isSandboxID } from '../../ids.js';
import { SANDBOX_USERS, sandboxUser } from '../../templates/store.js';
import type { DirRecords, ExecProcess, ExecRequest, LaunchSpec, RuntimeDriver, SandboxHandle, SandboxStats } from '../types.js';
import { simExec } from './exec.js';
import { newTree, SimFiles, treeBytes, type SimTree } from './files.js';

export interface SimDriverOptions {
  /** Where sandboxes' directories would be: <dataDir>/sandboxes (older versions made them). */
  dataDir: string;
}

interface SimSandbox {
  handle: SandboxHandle;
  spec: LaunchSpec;
  paused: boolean;
  tree: SimTree;
  cpuNs: number;
  running: number;
}

/** A simulated sandbox's resident memory: a small base, as an idle init would take, plus its files. */
const BASE_MEMORY_BYTES = 4 << 20;

let nextInitPid = 1;

export class SimDriver implements RuntimeDriver {
  readonly name = 'sim' as const;
  private readonly boxes = new Map<string, SimSandbox>();
  private readonly root: string;
  readonly files: SimFiles;
  /** The cubelet's meta of each sandbox, by its directory, as metaKeeper() keeps it. */
  private readonly metas = new Map<string, unknown>();

  /** Keeps the cubelet's meta of each sandbox (CubeletOptions.meta) in memory, as a copy a later change does not reach (as a file would), until the sandbox is destroyed. */
  metaKeeper<T>(): DirRecords<T> {
    return {
      write: async (dir, value) => void this.metas.set(dir, structuredClone(value)),
      read: async (dir) => {
        const m = this.metas.get(dir) as T | undefined;
        return m === undefined ? undefined : structuredClone(m);
      },
    };
  }

  constructor(o: SimDriverOptions) {
    this.root = join(o.dataDir, 'sandboxes');
    this.files = new SimFiles((h) => this.box(h).tree);
  }

  private box(h: SandboxHandle): SimSandbox {
    const b = this.boxes.get(h.sandboxID);
    if (!b) throw new CubeError('NOT_FOUND', `sandbox ${h.sandboxID} is not running`);
    return b;
  }

  async init(): Promise<void> {
    await mkdir(this.root, { recursive: true, mode: 0o700 });
  }

  async create(spec: LaunchSpec): Promise<SandboxHandle> {
    if (!isSandboxID(spec.sandboxID)) throw new CubeError('BAD_REQUEST', `invalid sandbox id ${spec.sandboxID}`);
    if (this.boxes.has(spec.sandboxID)) throw new CubeError('CONFLICT', `sandbox ${spec.sandboxID} already exists`);
    // Where a sandbox's directory would be: nothing is made there.
    const dir = join(this.root, spec.sandboxID);
    // A fake pid: nothing runs. Negative so that nobody mistakes it for a host process.
    const handle: SandboxHandle = { sandboxID: spec.sandboxID, initPid: -nextInitPid++, dir };
    this.boxes.set(spec.sandboxID, { handle, spec, paused: false, tree: newTree(), cpuNs: 0, running: 0 });
    return handle;
  }

  async destroy(sandboxID: string): Promise<void> {
    this.boxes.delete(sandboxID);
    this.metas.delete(join(this.root, sandboxID));
  }

  async pause(h: SandboxHandle): Promise<void> {
    this.box(h).paused = true;
  }

  async resume(h: SandboxHandle): Promise<void> {
    this.box(h).paused = false;
  }

  alive(h: SandboxHandle): boolean {
    return this.boxes.get(h.sandboxID)?.handle.initPid === h.initPid;
  }

  exec(h: SandboxHandle, req: ExecRequest): ExecProcess {
    const b = this.box(h);
    if (b.paused) throw new CubeError('SANDBOX_BUSY', `sandbox ${h.sandboxID} is paused`);
    const user = sandboxUser(req.user);
    const home = user === SANDBOX_USERS.root ? SANDBOX_USERS.root.home : SANDBOX_USERS.user.home;
    const env = { PATH: '/usr/local/bin:/usr/bin:/bin', HOME: home, USER: req.user ?? 'user', ...b.spec.env, ...(req.env ?? {}) };
    b.running++;
    return simExec(req, env, req.cwd ?? home, {
      readFile: async (path) => Buffer.concat(await (await this.files.read(h, path.startsWith('/') ? path : `${req.cwd ?? home}/${path}`)).toArray()),
      onExit: (ms) => {
        b.running--;
        // A simulated command costs the cpu time of a short-lived process: a millisecond, or its run time when shorter.
        b.cpuNs += Math.min(ms, 1) * 1e6;
      },
    });
  }

  async stats(h: SandboxHandle): Promise<SandboxStats> {
    const b = this.box(h);
    return {
      memoryBytes: BASE_MEMORY_BYTES + treeBytes(b.tree),
      memoryLimitBytes: b.spec.memoryMiB * 2 ** 20,
      cpuUsageNs: b.cpuNs,
      pids: 1 + b.running,
      oomKills: 0,
    };
  }

  async oomKills(): Promise<number> {
    return 0;
  }

  async scan(): Promise<SandboxHandle[]> {
    return [...this.boxes.values()].map((b) => ({ ...b.handle }));
  }

  async cleanup(keep: Set<string>): Promise<{ removed: string[] }> {
    const removed: string[] = [];
    for (const id of [...this.boxes.keys()]) {
      if (keep.has(id)) continue;
      await this.destroy(id);
      removed.push(id);
    }
    const dirs = await readdir(this.root).catch(() => [] as string[]);
    for (const id of dirs) {
      if (keep.has(id) || !isSandboxID(id)) continue;
      await rm(join(this.root, id), { recursive: true, force: true });
      if (!removed.includes(id)) removed.push(id);
    }
    return { removed };
  }
}
