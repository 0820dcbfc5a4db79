// Several runtime drivers on one node (cubelet.toml `runtime = ["ns", "microvm"]`): each sandbox
// is created by the driver its create names (the first one by default), and every later call on
// it goes to that driver. Scan and cleanup ask every driver, and each cleanup keeps the sandboxes
// the others re-adopted (they share the node's cgroup parent).
import { CubeError } from '../errors.js';
import type { RuntimeInfo } from '../model/node.js';
import type { PauseOptions } from '../model/sandbox.js';
import type {
  ExecProcess,
  ExecRequest,
  FileMetadata,
  FsChange,
  LaunchSpec,
  RuntimeDriver,
  SandboxFiles,
  SandboxHandle,
  SandboxSnapshots,
  SandboxStats,
  SandboxStorage,
  VolumeHost,
  WatchRequest,
} from './types.js';

export type RuntimeName = RuntimeDriver['name'];

export class RuntimeSet implements RuntimeDriver {
  readonly name: RuntimeName;
  readonly files: SandboxFiles;
  /** The node's store of writable layers (the ns driver's). */
  readonly storage?: SandboxStorage;
  /** The node's volumes (the ns driver's); a create with volumes on another runtime is refused. */
  readonly volumes?: VolumeHost;
  /** The kept snapshots of the driver that keeps them (ns); a sandbox of another runtime is refused. */
  readonly sandboxSnapshots?: SandboxSnapshots;
  private readonly owner = new Map<string, RuntimeDriver>();

  constructor(private readonly drivers: RuntimeDriver[]) {
    if (!drivers.length) throw new CubeError('CONFIG_INVALID', 'a node needs at least one runtime');
    this.name = drivers[0]!.name;
    const storage = drivers.find((d) => d.storage)?.storage;
    if (storage) this.storage = storage;
    const volumes = drivers.find((d) => d.volumes)?.volumes;
    if (volumes) this.volumes = volumes;
    // Each runtime keeps its own sandboxes' snapshots; a removal asks every keeper (idempotent).
    const keepers = drivers.flatMap((d) => (d.sandboxSnapshots ? [d.sandboxSnapshots] : []));
    if (keepers.length) {
      this.sandboxSnapshots = {
        take: (h, snapshotID) => {
          const d = this.driverOf(h.sandboxID);
          if (!d.sandboxSnapshots) throw new CubeError('CONFLICT', `sandbox ${h.sandboxID} runs on ${d.name}, which keeps no snapshots here`);
          return d.sandboxSnapshots.take(h, snapshotID);
        },
        remove: async (snapshotID) => {
          for (const k of keepers) await k.remove(snapshotID);
        },
        list: async () => [...new Set((await Promise.all(keepers.map((k) => k.list()))).flat())],
      };
    }
    const of = (h: SandboxHandle) => this.driverOf(h.sandboxID).files;
    this.files = {
      stat: (h, p, u, as) => of(h).stat(h, p, u, as),
      list: (h, p, d, u, as) => of(h).list(h, p, d, u, as),
      read: (h, p, u, as) => of(h).read(h, p, u, as),
      write: (h, p, data, u, m, as) => of(h).write(h, p, data, u, m, as),
      mkdir: (h, p, u, as) => of(h).mkdir(h, p, u, as),
      remove: (h, p, u, as) => of(h).remove(h, p, u, as),
      move: (h, a, b, u, as) => of(h).move(h, a, b, u, as),
    };
  }

  /** What the node offers, for NodeView.runtimes. */
  runtimes(): RuntimeInfo[] {
    return this.drivers.flatMap((d) => d.runtimes?.() ?? [{ name: d.name }]);
  }

  /** The driver a create names (undefined: the node's default); 400 when the node does not offer it. */
  pick(runtime: string | undefined): RuntimeDriver {
    if (runtime === undefined) return this.drivers[0]!;
    const d = this.drivers.find((x) => x.name === runtime);
    if (!d) throw new CubeError('BAD_REQUEST', `runtime '${runtime}' is not offered by this node (it offers ${this.drivers.map((x) => x.name).join(', ')})`);
    return d;
  }

  private driverOf(sandboxID: string): RuntimeDriver {
    return this.owner.get(sandboxID) ?? this.drivers[0]!;
  }

  async init(): Promise<void> {
    for (const d of this.drivers) await d.init();
  }

  async create(spec: LaunchSpec & { runtime?: string }): Promise<SandboxHandle> {
    const d = this.pick(spec.runtime);
    if (spec.volumes?.length && !d.volumes)
      throw new CubeError('VOLUME_RUNTIME', `the ${d.name} runtime cannot mount volumes: create with metadata cube.runtime=ns`);
    this.owner.set(spec.sandboxID, d);
    try {
      return await d.create(spec);
    } catch (e) {
      this.owner.delete(spec.sandboxID);
      throw e;
    }
  }

  async destroy(sandboxID: string): Promise<void> {
    const d = this.owner.get(sandboxID);
    // Unknown (a create that failed before choosing, a leftover): every driver removes what it has.
    if (d) await d.destroy(sandboxID);
    else for (const x of this.drivers) await x.destroy(sandboxID);
    this.owner.delete(sandboxID);
  }

  pause(h: SandboxHandle, opts?: PauseOptions): Promise<void> {
    return this.driverOf(h.sandboxID).pause(h, opts);
  }

  resume(h: SandboxHandle): Promise<void> {
    return this.driverOf(h.sandboxID).resume(h);
  }

  alive(h: SandboxHandle): boolean {
    return this.driverOf(h.sandboxID).alive(h);
  }

  exec(h: SandboxHandle, req: ExecRequest): ExecProcess {
    return this.driverOf(h.sandboxID).exec(h, req);
  }

  /** The agent of a sandbox whose driver has one; true for the others (their liveness is alive()). */
  answers(h: SandboxHandle, deadlineMs: number): Promise<boolean> {
    const d = this.driverOf(h.sandboxID);
    return d.answers ? d.answers(h, deadlineMs) : Promise.resolve(true);
  }

  deathReason(h: SandboxHandle): string | undefined {
    return this.driverOf(h.sandboxID).deathReason?.(h);
  }

  readMetadata(h: SandboxHandle, paths: string[], user?: string): Promise<FileMetadata[]> {
    const d = this.driverOf(h.sandboxID);
    return d.readMetadata ? d.readMetadata(h, paths, user) : Promise.resolve(paths.map(() => ({})));
  }

  writeMetadata(h: SandboxHandle, path: string, meta: FileMetadata, user?: string): Promise<void> {
    const d = this.driverOf(h.sandboxID);
    if (!d.writeMetadata) throw new CubeError('BAD_REQUEST', `the ${d.name} runtime keeps no file metadata`);
    return d.writeMetadata(h, path, meta, user);
  }

  watch(h: SandboxHandle, req: WatchRequest): Promise<AsyncIterable<FsChange>> {
    const d = this.driverOf(h.sandboxID);
    if (!d.watch) throw new CubeError('BAD_REQUEST', `the ${d.name} runtime cannot watch directories`);
    return d.watch(h, req);
  }

  stats(h: SandboxHandle): Promise<SandboxStats> {
    return this.driverOf(h.sandboxID).stats(h);
  }

  oomKills(h: SandboxHandle): Promise<number> {
    return this.driverOf(h.sandboxID).oomKills(h);
  }

  /** The runtime a sandbox runs on. */
  runtimeOf(sandboxID: string): RuntimeName {
    return this.driverOf(sandboxID).name;
  }

  /** The drivers share the node's cgroup parent: the first that can tell covers them all. */
  cpuUsageUsec(): number | undefined {
    for (const d of this.drivers) {
      const u = d.cpuUsageUsec?.();
      if (u !== undefined) return u;
    }
    return undefined;
  }

  async scan(): Promise<SandboxHandle[]> {
    const out: SandboxHandle[] = [];
    for (const d of this.drivers) {
      for (const h of await d.scan()) {
        this.owner.set(h.sandboxID, d);
        out.push(h);
      }
    }
    return out;
  }

  async close(opts: { destroy: boolean }): Promise<void> {
    for (const d of this.drivers) await d.close?.(opts);
  }

  async cleanup(keep: Set<string>): Promise<{ removed: string[] }> {
    const removed = new Set<string>();
    for (const d of this.drivers) for (const id of (await d.cleanup(keep)).removed) removed.add(id);
    for (const id of this.owner.keys()) if (!keep.has(id)) this.owner.delete(id);
    return { removed: [...removed] };
  }
}
