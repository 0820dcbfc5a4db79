// The `microvm` runtime driver: each sandbox is a QEMU `-M microvm` VM with its own kernel
// (Debian's cloud kernel, build/microvm), booted from our initramfs onto the template's read-only
// ext4 image (vda) under an overlay whose upper is the sandbox's own disk (vdb: a qcow2 overlay on a
// blank ext4 of disk_gib). The guest agent (native/cube-agent.c) answers on virtio-serial; QMP
// runs the VM's lifecycle. QEMU runs inside the sandbox's pooled netns, a TAP-mode slot of the
// network agent's TAP pool (src/network/tap.ts): its TAP and the NAT of the guest's fixed address
// to the slot's address are ready there and reset by the pool when the slot comes back; and
// inside the sandbox's cgroups.
// Without /dev/kvm the guest is emulated (TCG, about 38x slower on CPU: runtime-probe.md §6).
import { existsSync, readFileSync } from 'node:fs';
import { mkdir, readFile, readdir, rename, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Logger } from 'pino';
import { CubeError, toCubeError } from '../../errors.js';
import { isSandboxID } from '../../ids.js';
import type { RuntimeInfo } from '../../model/node.js';
import type { PauseOptions, SnapshotKeeps } from '../../model/sandbox.js';
import type { BtrfsStore } from '../../storage/btrfs-store.js';
import { Cgroups, keyedValue } from '../ns/cgroups.js';
import { DEFAULT_IDENTITY, HostIdRanges } from '../ns/ids.js';
import { hostTables, nodeParentLimits } from '../ns/host-limits.js';
import type { ExecProcess, ExecRequest, LaunchSpec, RuntimeDriver, SandboxFiles, SandboxHandle, SandboxSnapshots, SandboxStats, VolumeHost } from '../types.js';
import { GuestAgents } from './agents.js';
import { agentExec } from './exec.js';
import { MicrovmFiles } from './files.js';
import { QEMU_OVERHEAD_MIB, diskLimitBytes, memoryRefusal, microvmArtifacts, kvmUsable, onPath } from './host.js';
import { ImageCache, overlayDisk } from './images.js';
import { MemorySnapshots, waitGone } from './memory-snapshots.js';
import { withQmp } from './qmp.js';
import { ConsoleLog, consoleTail } from './console.js';
import { QEMU, type VmFiles, type VmShape, killPid, launchQemu, migrationSocket, qemuArgs, restore, saveState } from './qemu.js';
import { readTextOrAbsent, statOrAbsent } from '../../fsx.js';
import { LONGEST_SOCKET, type VmVolume, assertMigratable, startVirtiofsd, virtiofsdEnded, volumeSources, volumeTag } from './virtiofs.js';

export interface MicrovmDriverOptions {
  dataDir: string;
  nodeTag: string;
  log?: Logger;
  /** A guest that has not answered by then is a failed create (console tail in the error). */
  bootTimeoutMs?: number;
  /** Default: build/microvm of this package (npm run build). */
  buildDir?: string;
  /** Create from per-shape memory snapshots (default true); false: every create boots cold. */
  snapshots?: boolean;
  /** The node's memory (declared, else MemTotal): a VM whose memory and QEMU's cannot fit is refused. */
  nodeMemoryMiB?: number;
  /** The node's declared memory (cubelet quota.memory_mib): the limit of the node's parent cgroup, which holds every QEMU. */
  declaredMemoryMiB?: number;
  /**
   * The node's store of writable layers (the ns driver's, opened by it, on a node offering both):
   * each VM's disk goes in a subvolume of its own whose quota group holds it to disk_gib, as for
   * ns, and counts in the store's figures. Absent: the disk stays in the sandbox's directory.
   */
  storage?: BtrfsStore;
  /** Host id ranges (the ns driver's on a node with both: no QEMU shares an ns sandbox's ids), a QEMU per range; absent: from `identity`. */
  ids?: HostIdRanges;
  /** cubelet identity.* (its ranges are used whatever `userns` says: a QEMU never runs as root). */
  identity?: { hostIdBase: number; hostIdRanges: number };
  /** A VM's console log is rotated at this size (console.log + console.log.1 on the host). */
  consoleLogBytes?: number;
  /** The node's volumes (the ns driver's, in its store), mounted through virtio-fs (virtiofs.ts); absent: refused. */
  volumes?: VolumeHost;
}

/** cubelet microvm.console_log_kib's default. */
export const CONSOLE_LOG_BYTES = 1024 * 1024;

/** Unix socket paths are limited to 107 bytes. */
const SUN_PATH_MAX = 107;

/** What a sandbox's exec, re-adoption and resume need: kept in its directory (vm.json). */
interface VmRecord {
  template: string;
  env: Record<string, string>;
  /** QEMU's pid: a new one after a releasing pause is resumed. */
  pid: number;
  /** QEMU's argv, to start it again for a resume from released memory. */
  args: string[];
  /** The guest's disk and memory (absent in records of an older cubed): what a kept snapshot of it restores. */
  diskGiB?: number;
  memoryMiB?: number;
  /** QEMU's host uid and gid (the first id of a range of ours); absent: an older cubed's unconfined QEMU. */
  idBase?: number;
  /** The files QEMU gets as descriptors (absent: an older cubed's QEMU, which opens them by path). */
  files?: VmFiles;
  /** Volumes mounted in the guest (each served by a virtiofsd in the sandbox's cgroups). */
  volumes?: Pick<VmVolume, 'volumeID' | 'path'>[];
}

/** A kept snapshot's guest: its writable filesystem is `diskGiB` big and its memory `memoryMiB`, whatever a create asks. */
type KeptShape = Pick<VmRecord, 'diskGiB' | 'memoryMiB'>;
const KEPT_SHAPE = 'shape.json';

/** The guest's memory and device state while a releasing pause holds it (QEMU ended), in the sandbox's directory. */
const RELEASED = 'memory.state';

export class MicrovmDriver implements RuntimeDriver {
  readonly name = 'microvm' as const;
  readonly files: SandboxFiles;
  readonly kvm = kvmUsable();
  private readonly root: string;
  private readonly images: ImageCache;
  private readonly log: Logger | undefined;
  private cgroupsOrUndefined?: Cgroups;
  private readonly records = new Map<string, VmRecord>();
  /** Per sandbox: how many times its guest was stopped on purpose (pause, resume, snapshot). */
  private readonly stops = new Map<string, number>();
  /** The host ends of the guest agents' channels. */
  private readonly agents: GuestAgents;
  private readonly netns = new Map<string, string>();
  /** Each running VM's console log (with QEMU's stderr). */
  private readonly consoles = new Map<string, ConsoleLog>();
  private readonly ids: HostIdRanges;
  /** Memory snapshots by shape, booted once and cloned by creates. */
  private readonly snapshots: MemorySnapshots;
  /** Kept sandbox states (E2B snapshots): <keptRoot>/<snapshotID>/memory.state; the disk is kept in the store. */
  private readonly keptRoot: string;
  /**
   * A snapshot keeps the processes: the guest's memory and device state (migrated while the VM is
   * stopped) and its disk (a read-only snapshot of its subvolume). Needs the store (a node offering ns too).
   */
  readonly sandboxSnapshots?: SandboxSnapshots;
  readonly volumes?: VolumeHost;

  constructor(private readonly opts: MicrovmDriverOptions) {
    this.root = join(opts.dataDir, 'microvm', 'sandboxes');
    this.keptRoot = join(opts.dataDir, 'microvm', 'kept');
    this.images = new ImageCache(opts.dataDir);
    const identity = opts.identity ?? DEFAULT_IDENTITY;
    this.ids = opts.ids ?? new HostIdRanges(identity.hostIdBase, identity.hostIdRanges);
    this.log = opts.log?.child({ component: 'runtime-microvm' });
    this.snapshots = new MemorySnapshots({
      dataDir: opts.dataDir,
      ids: this.ids,
      bootTimeoutMs: opts.bootTimeoutMs ?? 60_000,
      openConsole: (id, dir) => this.openConsole(id, dir),
      closeConsole: (id) => this.closeConsole(id),
      ...(this.log ? { log: this.log } : {}),
    });
    this.agents = new GuestAgents({
      running: (h) => this.running(h),
      pidOf: (h) => this.pidOf(h),
      consoleTail: (h) => this.consoleTail(h),
      ...(this.log ? { log: this.log } : {}),
    });
    this.files = new MicrovmFiles((h) => this.agents.get(h));
    if (opts.volumes) this.volumes = opts.volumes;
    const storage = opts.storage;
    if (storage) {
      this.sandboxSnapshots = {
        take: (h, snapshotID) => this.keep(storage, h, snapshotID),
        remove: async (snapshotID) => {
          await rm(join(this.keptRoot, snapshotID), { recursive: true, force: true });
          await storage.drop(snapshotID);
        },
        list: () => readdir(this.keptRoot).catch(() => [] as string[]),
      };
    }
  }

  /** Saves the stopped VM's memory and device state, then snapshots its disk's subvolume; the caller's resume runs it on (QMP cont). */
  private async keep(storage: BtrfsStore, h: SandboxHandle, snapshotID: string): Promise<SnapshotKeeps> {
    this.stopping(h.sandboxID);
    if (!this.running(h)) throw new CubeError('CONFLICT', `sandbox ${h.sandboxID} is paused with its memory released: resume it before taking a snapshot`);
    assertMigratable(h.sandboxID, this.records.get(h.sandboxID)?.volumes);
    const dir = join(this.keptRoot, snapshotID);
    await mkdir(dir, { recursive: true });
    try {
      const r = this.records.get(h.sandboxID);
      const shape: KeptShape = { ...(r?.diskGiB ? { diskGiB: r.diskGiB } : {}), ...(r?.memoryMiB ? { memoryMiB: r.memoryMiB } : {}) };
      await writeFile(join(dir, KEPT_SHAPE), JSON.stringify(shape));
      await withQmp(join(h.dir, 'q.sock'), (q) => saveState(q, join(dir, RELEASED), this.migrationVia(h)));
      await storage.keep(h.sandboxID, snapshotID);
    } catch (e) {
      await rm(dir, { recursive: true, force: true });
      throw e;
    }
    return 'filesystem+memory';
  }

  private get cgroups(): Cgroups {
    if (!this.cgroupsOrUndefined) throw new CubeError('INTERNAL', 'microvm driver used before init()');
    return this.cgroupsOrUndefined;
  }

  async init(): Promise<void> {
    const a = microvmArtifacts(this.opts.buildDir);
    if (a.missing) throw new CubeError('INTERNAL', `microvm runtime: ${a.missing}`);
    if (!['qemu-img', QEMU, 'mkfs.ext4', 'nsenter', 'setpriv'].every(onPath)) {
      throw new CubeError(
        'INTERNAL',
        `microvm runtime: ${QEMU}, qemu-img, mkfs.ext4, nsenter and setpriv are needed (install.sh installs qemu-system-x86, qemu-utils, e2fsprogs, util-linux)`,
      );
    }
    await this.ids.checkHost();
    // QEMU runs in the sandbox's cgroups under the node's parent: its pids and memory limits hold
    // the VMs too, also on a node offering microvm only or when a microVM makes the parent again.
    this.cgroupsOrUndefined = new Cgroups(this.opts.nodeTag);
    await this.cgroups.init(nodeParentLimits(await hostTables(this.log), this.opts.declaredMemoryMiB));
    await mkdir(this.root, { recursive: true });
  }

  private dir(id: string): string {
    return join(this.root, id);
  }

  /**
   * The saved state of kept snapshot `snapshotID`; NOT_FOUND when this node does not keep it.
   * A sandbox made from it restores the guest as it was: its filesystem keeps the snapshot's size
   * (the host limit of its disk is set from it) and its memory cannot change, so a create asking
   * for another disk or memory is refused rather than given a guest that disagrees with its limits.
   */
  private async keptState(snapshotID: string, diskGiB: number, memoryMiB: number): Promise<string> {
    if (!this.opts.storage) throw new CubeError('CONFLICT', 'this node keeps no microVM snapshots (they need the store of a node that offers ns too)');
    const state = join(this.keptRoot, snapshotID, RELEASED);
    if (!existsSync(state)) throw new CubeError('NOT_FOUND', `snapshot ${snapshotID} is not kept by the microvm runtime of this node`);
    const kept = await readFile(join(this.keptRoot, snapshotID, KEPT_SHAPE), 'utf8').then(
      (t) => JSON.parse(t) as KeptShape,
      () => ({}) as KeptShape,
    );
    if ((kept.diskGiB !== undefined && kept.diskGiB !== diskGiB) || (kept.memoryMiB !== undefined && kept.memoryMiB !== memoryMiB)) {
      throw new CubeError(
        'BAD_REQUEST',
        `snapshot ${snapshotID} holds a microVM of ${kept.diskGiB ?? '?'} GiB of disk and ${kept.memoryMiB ?? '?'} MiB of memory: a sandbox made from it keeps them (asked: ${diskGiB} GiB, ${memoryMiB} MiB)`,
      );
    }
    return state;
  }

  /** The VM's writable disk: in its subvolume of the store, else in its directory. */
  private diskOf(id: string): string {
    return join(this.opts.storage ? this.opts.storage.dir(id) : this.dir(id), 'disk.qcow2');
  }

  async create(spec: LaunchSpec): Promise<SandboxHandle> {
    const id = spec.sandboxID;
    if (!isSandboxID(id)) throw new CubeError('BAD_REQUEST', `invalid sandbox id '${id}'`);
    if (!(spec.memoryMiB >= 64 && spec.cpus > 0 && spec.pidsMax > 0)) {
      throw new CubeError('BAD_REQUEST', `a microVM needs cpus > 0 and at least 64 MiB of memory (got ${spec.cpus} cpus, ${spec.memoryMiB} MiB)`);
    }
    const tooBig = memoryRefusal(spec.memoryMiB, this.opts.nodeMemoryMiB);
    if (tooBig) throw new CubeError('BAD_REQUEST', tooBig);
    const dir = this.dir(id);
    if (join(dir, LONGEST_SOCKET).length > SUN_PATH_MAX)
      throw new CubeError('CREATE_FAILED', `data dir too deep: ${dir}/${LONGEST_SOCKET} exceeds the ${SUN_PATH_MAX}-byte socket path limit`);
    const volumes = volumeSources(spec, this.volumes);
    // Checked before anything is made: a template without a bootable layout is the caller's error.
    await this.images.templateKey(spec.template);
    try {
      await mkdir(dir);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'EEXIST') throw new CubeError('CONFLICT', `sandbox ${id} already exists on this node`);
      throw toCubeError(e, 'CREATE_FAILED');
    }
    const t0 = performance.now();
    const idBase = this.ids.take();
    try {
      const a = microvmArtifacts(this.opts.buildDir);
      const diskGiB = spec.diskGiB ?? 1;
      const [image, blank] = await Promise.all([this.images.template(spec.template), this.images.blank(diskGiB)]);
      const shape: VmShape = { kernel: a.kernel, initrd: a.initrd, image, cpus: spec.cpus, memoryMiB: spec.memoryMiB, kvm: this.kvm };
      // With volumes a cold boot: virtiofsd maps guest memory, which a snapshot clone maps private.
      const snap = this.opts.snapshots === false || volumes.length ? undefined : await this.snapshots.get(shape, blank, diskGiB);
      // From a kept snapshot: its memory and its disk (a writable snapshot of the kept subvolume).
      const kept = spec.fromSnapshot === undefined ? undefined : await this.keptState(spec.fromSnapshot, diskGiB, spec.memoryMiB);
      this.opts.storage?.assertRoom();
      // Held to disk_gib on the host whichever way it is made (the guest's own filesystem is that size too).
      if (kept) await this.opts.storage!.takeFrom(spec.fromSnapshot!, id, diskLimitBytes(diskGiB));
      else await this.opts.storage?.create(id, diskLimitBytes(diskGiB));
      const disk = this.diskOf(id);
      await Promise.all([
        kept ? undefined : snap ? overlayDisk(join(snap, 'disk.qcow2'), disk, 'qcow2') : overlayDisk(blank, disk, 'raw'),
        this.cgroups.create(id, { memoryMiB: spec.memoryMiB + QEMU_OVERHEAD_MIB, cpus: spec.cpus, pidsMax: Math.max(spec.pidsMax, 64) }),
      ]);
      const net = spec.netnsPath ? 'tap' : 'hub';
      const args = qemuArgs({
        ...shape,
        id,
        dir,
        disk,
        net,
        uid: idBase,
        ...(snap ? { ram: { path: join(snap, 'ram'), shared: false } } : {}),
        incoming: !!(snap || kept),
        volumes: volumes.length,
      });
      for (const [i, v] of volumes.entries()) await startVirtiofsd(dir, i, v.source, this.cgroups, id);
      if (spec.netnsPath) {
        this.netns.set(id, spec.netnsPath);
        await writeFile(join(dir, 'netns'), spec.netnsPath);
      }
      const tPrepared = performance.now();
      const state = kept ?? (snap ? join(snap, 'state') : undefined);
      const files: VmFiles = { image, disk };
      const pid = await launchQemu(dir, args, {
        netnsPath: spec.netnsPath,
        procs: this.cgroups.procsFiles(id),
        files,
        ...(state ? { state } : {}),
        console: this.openConsole(id, dir),
      });
      const tLaunched = performance.now();
      const mounts = volumes.length ? { volumes: volumes.map(({ volumeID, path }) => ({ volumeID, path })) } : {};
      const record: VmRecord = { template: spec.template.name, env: spec.env, pid, args, diskGiB, memoryMiB: spec.memoryMiB, idBase, files, ...mounts };
      await writeFile(join(dir, 'vm.json'), JSON.stringify(record));
      this.records.set(id, record);
      const h: SandboxHandle = { sandboxID: id, initPid: pid, dir };
      if (state) await restore(join(dir, 'q.sock'));
      const tRestored = performance.now();
      await this.agents.wait(h, this.opts.bootTimeoutMs ?? 60_000);
      const tAgent = performance.now();
      await this.agents.identify(h);
      for (const [i, v] of volumes.entries()) await this.agents.mount(h, volumeTag(i), v.path);
      const ms = (a: number, b: number) => Math.round(b - a);
      const now = performance.now();
      this.log?.debug(
        {
          sandboxID: id,
          pid,
          fromSnapshot: !!snap,
          volumes: volumes.length,
          ms: ms(t0, now),
          prepareMs: ms(t0, tPrepared),
          launchMs: ms(tPrepared, tLaunched),
          restoreMs: ms(tLaunched, tRestored),
          agentMs: ms(tRestored, tAgent),
          identifyMs: ms(tAgent, now),
        },
        'microVM up',
      );
      return h;
    } catch (e) {
      const recorded = this.records.has(id);
      await this.remove(id).catch((d: unknown) => this.log?.error({ sandboxID: id, err: d }, 'cleanup after failed create failed'));
      if (!recorded) this.ids.release(idBase);
      throw toCubeError(e, 'CREATE_FAILED');
    }
  }

  private openConsole(id: string, dir: string): ConsoleLog {
    this.consoles.get(id)?.close();
    const c = new ConsoleLog(dir, this.opts.consoleLogBytes ?? CONSOLE_LOG_BYTES);
    this.consoles.set(id, c);
    return c;
  }

  private closeConsole(id: string): void {
    this.consoles.get(id)?.close();
    this.consoles.delete(id);
  }

  /** Where the VM of `h` migrates through (its jail, for a confined QEMU). */
  private migrationVia(h: SandboxHandle): { host: string; qemu: string; uid?: number } {
    const r = this.records.get(h.sandboxID);
    return { ...migrationSocket(h.dir, r?.args ?? []), ...(r?.idBase !== undefined ? { uid: r.idBase } : {}) };
  }

  /** The last lines the guest printed on its console (for errors). */
  consoleTail(h: { dir: string }, lines = 15): string {
    return consoleTail(h.dir, lines);
  }

  async destroy(sandboxID: string): Promise<void> {
    if (!isSandboxID(sandboxID)) throw new CubeError('BAD_REQUEST', `invalid sandbox id '${sandboxID}'`);
    await this.remove(sandboxID);
  }

  /**
   * QEMU killed with its cgroup, the disk and the directory gone. Idempotent. The slot's TAP and
   * NAT are the TAP pool's: reset there when the slot comes back, so destroy is the kill and the
   * files (the netns undo was 180-320 ms of a 210-410 ms destroy, measured by mvm at load 8).
   */
  private async remove(id: string): Promise<void> {
    try {
      const t0 = performance.now();
      this.agents.drop(id);
      await this.cgroups.destroy(id);
      this.closeConsole(id);
      const tKilled = performance.now();
      await this.opts.storage?.remove(id);
      await rm(this.dir(id), { recursive: true, force: true });
      const ms = (a: number) => Math.round(a - t0);
      this.log?.debug({ sandboxID: id, killMs: ms(tKilled), ms: ms(performance.now()) }, 'microVM removed');
      const idBase = this.records.get(id)?.idBase;
      if (idBase !== undefined) this.ids.release(idBase);
      this.records.delete(id);
      this.netns.delete(id);
      this.agents.broken.delete(id);
      this.stops.delete(id);
    } catch (e) {
      throw toCubeError(e, 'DESTROY_FAILED');
    }
  }

  /** A releasing pause frees the guest's memory: the release ratio is backed here. */
  runtimes(): RuntimeInfo[] {
    // cube.net_raw asks nothing of a guest: its root has raw sockets in its own kernel.
    return [{ name: this.name, ...(this.kvm ? {} : { emulated: true }), releaseBacked: true, netRaw: true }];
  }

  /** Plain: QMP `stop` (the memory stays). Releasing: the guest's memory written to a file and QEMU ended. */
  async pause(h: SandboxHandle, opts: PauseOptions = {}): Promise<void> {
    this.stopping(h.sandboxID);
    // A VM with volumes keeps its memory, as an ns sandbox does: QEMU 7.2 cannot save a virtio-fs device.
    const release = opts.release && !this.records.get(h.sandboxID)?.volumes?.length;
    await (release ? this.release(h) : withQmp(join(h.dir, 'q.sock'), (q) => q.run('stop'))).catch((e: unknown) => {
      throw toCubeError(e, 'PAUSE_FAILED');
    });
  }

  async resume(h: SandboxHandle): Promise<void> {
    this.stopping(h.sandboxID);
    await (existsSync(join(h.dir, RELEASED)) ? this.reload(h) : withQmp(join(h.dir, 'q.sock'), (q) => q.run('cont'))).catch((e: unknown) => {
      throw toCubeError(e, 'RESUME_FAILED');
    });
  }

  /**
   * Stops the guest, migrates its RAM and device state to RELEASED (file-backed RAM of a clone is
   * private, so x-ignore-shared does not skip it: every page the guest has is saved) and ends
   * QEMU. A failed save leaves the VM running as it was.
   */
  private async release(h: SandboxHandle): Promise<void> {
    if (!this.records.get(h.sandboxID)?.args)
      throw new CubeError(
        'PAUSE_FAILED',
        `sandbox ${h.sandboxID} was made by an older cubed (no QEMU argv in vm.json): it can only be paused with its memory kept`,
      );
    const pid = this.pidOf(h);
    const tmp = join(h.dir, `${RELEASED}.tmp`);
    await withQmp(join(h.dir, 'q.sock'), async (q) => {
      await q.run('stop');
      try {
        await saveState(q, tmp, this.migrationVia(h));
      } catch (e) {
        await q.run('cont');
        await rm(tmp, { force: true });
        throw e;
      }
      // Saved; a QEMU that does not take 'quit' is killed with its cgroup when the sandbox goes.
      await q.run('quit').catch(() => undefined);
    });
    this.agents.drop(h.sandboxID);
    await waitGone(pid);
    await rename(tmp, join(h.dir, RELEASED));
  }

  /**
   * Resume from released memory: QEMU again with the VM's argv (its disk, TAP and cgroups are
   * still there), the saved state loaded, the clock set. Until it answers the saved state is kept,
   * so a failed resume leaves the sandbox paused and resumable.
   */
  private async reload(h: SandboxHandle): Promise<void> {
    const id = h.sandboxID;
    const record = this.records.get(id);
    if (!record) throw new CubeError('INTERNAL', `sandbox ${id} has no vm.json`);
    const args = record.args.includes('-incoming') ? record.args : [...record.args, '-incoming', 'defer'];
    const pid = await launchQemu(h.dir, args, {
      netnsPath: this.netns.get(id),
      procs: this.cgroups.procsFiles(id),
      files: record.files,
      state: join(h.dir, RELEASED),
      console: this.openConsole(id, h.dir),
    });
    try {
      await restore(join(h.dir, 'q.sock'));
      const next = { ...record, pid };
      await writeFile(join(h.dir, 'vm.json'), JSON.stringify(next));
      this.records.set(id, next);
      await this.agents.wait(h, this.opts.bootTimeoutMs ?? 60_000);
      await this.agents.identify(h);
    } catch (e) {
      this.agents.drop(id);
      killPid(pid);
      await waitGone(pid);
      this.records.set(id, record);
      await writeFile(join(h.dir, 'vm.json'), JSON.stringify(record));
      throw e;
    }
    await rm(join(h.dir, RELEASED), { force: true });
  }

  /** QEMU's pid now (a resume from released memory starts a new one). */
  private pidOf(h: SandboxHandle): number {
    return this.records.get(h.sandboxID)?.pid ?? h.initPid;
  }

  /** Its QEMU runs. */
  private running(h: SandboxHandle): boolean {
    const pid = this.pidOf(h);
    try {
      const cmdline = readFileSync(`/proc/${pid}/cmdline`, 'utf8');
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      return cmdline.includes(`\0cube-${h.sandboxID},process=cube-vm\0`) && !/\) [ZX] /.test(stat);
    } catch {
      return false;
    }
  }

  /** Running, or held in memory released to a file by a pause. */
  alive(h: SandboxHandle): boolean {
    return this.running(h) || existsSync(join(h.dir, RELEASED));
  }

  /**
   * Its guest agent answers a ping within `deadlineMs` (a QEMU stopped, hung or whose guest lost
   * its agent does not). A pause, resume or snapshot begun during the ping stops the guest on
   * purpose: that is no verdict, so it counts as answered.
   */
  async answers(h: SandboxHandle, deadlineMs: number): Promise<boolean> {
    const before = this.stops.get(h.sandboxID) ?? 0;
    const answered = await this.agents.answers(h, deadlineMs);
    return answered || (this.stops.get(h.sandboxID) ?? 0) !== before;
  }

  /** Counts a stop of the guest on purpose (see answers()). */
  private stopping(id: string): void {
    this.stops.set(id, (this.stops.get(id) ?? 0) + 1);
  }

  deathReason(h: SandboxHandle): string {
    const broken = this.agents.broken.get(h.sandboxID);
    if (broken) return broken;
    return `the microVM's QEMU (pid ${this.pidOf(h)}) exited${virtiofsdEnded(h.dir)}; guest console: ${this.consoleTail(h, 5)}`;
  }

  exec(h: SandboxHandle, req: ExecRequest): ExecProcess {
    return agentExec(h, req, { running: () => this.running(h), env: () => this.records.get(h.sandboxID)?.env, agent: () => this.agents.get(h) });
  }

  async stats(h: SandboxHandle): Promise<SandboxStats> {
    const id = h.sandboxID;
    const [usage, limit, cpu, pids, disk] = await Promise.all([
      this.cgroups.readValue('memory', id, 'memory.usage_in_bytes'),
      this.cgroups.readValue('memory', id, 'memory.limit_in_bytes'),
      this.cgroups.readValue('unified', id, 'cpu.stat'),
      this.cgroups.readValue('pids', id, 'pids.current'),
      statOrAbsent(this.diskOf(id)),
    ]).catch((e: unknown) => {
      throw new CubeError('NOT_FOUND', `sandbox ${id} has no cgroups on this node`, { cause: e });
    });
    // The guest's own OOM kills happen inside its kernel; the host cgroup OOM-kills QEMU only.
    return {
      memoryBytes: Number(usage),
      memoryLimitBytes: Number(limit),
      cpuUsageNs: (keyedValue(cpu, 'usage_usec') ?? 0) * 1000,
      pids: Number(pids),
      oomKills: 0,
      // What the guest wrote: the blocks its qcow2 overlay holds (the template image is shared).
      ...(disk ? { diskUsedBytes: disk.blocks * 512 } : {}),
    };
  }

  /** The guest's own OOM kills happen inside its kernel; the host cgroup's would be QEMU's (the sandbox's death). */
  async oomKills(): Promise<number> {
    return 0;
  }

  /** QEMU runs in the sandbox's cgroups: the node parent's CPU time is the guests' (live cpu gate). */
  cpuUsageUsec(): number | undefined {
    return this.cgroupsOrUndefined?.usageUsec();
  }

  async scan(): Promise<SandboxHandle[]> {
    const out: SandboxHandle[] = [];
    for (const id of await readdir(this.root).catch(() => [] as string[])) {
      if (!isSandboxID(id)) continue;
      const dir = this.dir(id);
      const record = await readFile(join(dir, 'vm.json'), 'utf8').then(
        (t) => JSON.parse(t) as VmRecord,
        () => undefined,
      );
      if (!record) continue;
      const h = { sandboxID: id, initPid: record.pid, dir };
      if (!this.alive(h)) continue;
      if (record.idBase !== undefined && !this.ids.adopt(record.idBase)) {
        this.log?.warn({ sandboxID: id, idBase: record.idBase }, "a running microVM's host ids are outside the configured identity ranges");
      }
      this.records.set(id, record);
      if (this.running(h)) this.openConsole(id, dir).attach();
      const netns = await readTextOrAbsent(join(dir, 'netns'));
      if (netns) this.netns.set(id, netns);
      out.push(h);
    }
    return out;
  }

  async cleanup(keep: Set<string>): Promise<{ removed: string[] }> {
    const removed: string[] = [];
    for (const id of await readdir(this.root).catch(() => [] as string[])) {
      if (keep.has(id)) continue;
      await this.remove(id);
      removed.push(id);
    }
    if (removed.length) this.log?.info({ removed }, 'removed leftover microVMs');
    return { removed };
  }
}
