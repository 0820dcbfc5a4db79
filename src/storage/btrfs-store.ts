// The sandbox store: the writable layers of sandboxes on btrfs, one subvolume per sandbox with an
// exclusive quota-group limit of its disk size, so a writer or a file flood inside the sandbox gets
// EDQUOT and the host never fills (this kernel has no ext4/XFS quotas: runtime-probe.md section 5).
//
// Where: `<data-dir>/store`. When the data dir is on btrfs that is a plain directory of it (bind-
// mounted onto itself for nosuid,nodev); else (a fresh machine) a sparse image
// `<data-dir>/store.img` formatted btrfs and loop-mounted there nosuid,nodev (autoclear: unmounting
// frees the loop device). The mount is re-used across restarts (running sandboxes keep their upper
// dirs in it) and removed with the image by close({ destroy: true }) unless it holds volumes or
// template layers (`<store>/layers`, templates/store.ts layersRoot), which outlive a destroy.
//
// Every subvolume operation is an ioctl issued by the long-lived launch helper (`store` requests,
// native/launch/store.c): a forked child of a small process, no exec, no `btrfs` spawn. The create
// path does not even wait for that: empty subvolumes (with upper/ and work/) are made ahead in
// `<store>/pool/` like the network slots, a create renames one into place (0.1 ms) and the launch
// helper's `create -q` sets its limit in the request that builds the sandbox. A helper round trip
// costs 1-3 ms (measured 3.0 ms at load 16, the ioctl itself a fraction of it), the rename 0.1 ms.
// Removal is a subvolume delete: the kernel's cleaner drops the tree in the background, so a
// sandbox holding 200,000 files is gone without walking them.
//
// Kept snapshots (E2B createSnapshot, fork): a read-only snapshot of a sandbox's subvolume in
// `<store>/snapshots/<snapshotID>`; a sandbox made from one gets a writable snapshot of it as its
// own subvolume. Both are copy-on-write (no file is copied), and the two are independent trees:
// the kept snapshot can be deleted while sandboxes made from it run. A writable snapshot waits
// for a btrfs transaction commit (3.1 ms p50 against 0.2 ms for a pooled rename, load 20), so
// after the first create from a snapshot a few clones of it are kept ready in
// `<store>/clones/<snapshotID>.<n>` like the pool, and later creates rename one into place.
//
// Volumes (E2B volumes, src/runtime/ns/volumes.ts): a subvolume each in `<store>/volumes/<id>`
// with a quota-group limit of its size; they outlive sandboxes and daemon stops, destroy or not
// (close({ destroy: true }) keeps the image and the volumes in it).
import { chmod, chown, mkdir, open, readdir, rename, rm, rmdir, stat, statfs } from 'node:fs/promises';
import { join } from 'node:path';
import type { Logger } from 'pino';
import { CubeError } from '../errors.js';
import type { StoreView } from '../model/node.js';
import { namesOrNone, readTextOrAbsent, statOrAbsent } from '../fsx.js';
import { btrfsDevices } from './block-devices.js';
import { GIB, STORE_MIN_FREE_BYTES, imageBytes, isFullError, mib, storeLayersPath, storePath, usedPercentOf } from './sizes.js';
import { loopDevicesOf, mountHolders } from './loop-devices.js';
import { SECURE_OPTIONS, mountSource, secureMount } from './mounts.js';

export const BTRFS_MAGIC = 0x9123683e;
/** cube-launch `store delete`: the path is a plain directory (a data dir from before the store). */
const EXIT_NOT_SUBVOL = 3;
/** Subvolumes kept ready: a c=20 burst takes 20 at once, the refill makes ~300/s on an idle host. */
export const POOL_TARGET = 32;
const POOL_REFILL_CONCURRENCY = 2;
/** Writable clones kept ready per snapshot that sandboxes were made from (one create at a time takes one, a fork takes what is there). */
export const CLONE_TARGET = 4;

/** After a failed refill (a full store), the pool waits this long before trying again. */
const POOL_RETRY_MS = 5000;
/** How old the cached usage may be when a create checks the store has room. */
const USAGE_MAX_AGE_MS = 1000;

export type StoreUsage = StoreView;

/** What the store needs of the launch helper (src/runtime/ns/helper.ts): host commands and `store` requests. */
export interface StoreHelper {
  run(argv: readonly string[]): Promise<{ exitCode: number; stdout: string; stderr: string }>;
  store(argv: readonly string[]): Promise<{ exitCode: number; stdout: string; stderr: string }>;
}

export interface BtrfsStoreOptions {
  dataDir: string;
  helper: StoreHelper;
  /** Size of the loop image when the data dir is not on btrfs; 0 = half the free space of the data dir's filesystem. */
  imageGiB: number;
  log?: Logger;
}

export class BtrfsStore {
  readonly path: string;
  readonly image: string;
  /** Parent of the per-sandbox subvolumes. */
  readonly sandboxesDir: string;
  /** Parent of the ready subvolumes. */
  readonly poolDir: string;
  /** Parent of the kept (read-only) sandbox snapshots. */
  readonly snapshotsDir: string;
  /** Parent of the ready writable clones of kept snapshots. */
  readonly clonesDir: string;
  /** Parent of the volumes' subvolumes. */
  readonly volumesDir: string;
  /** Ready clones per snapshot id: name under clonesDir -> subvolume id. */
  private readonly clones = new Map<string, Map<string, number>>();
  private readonly cloning = new Set<string>();
  private kind?: 'btrfs' | 'loop';
  private fsid?: string;
  /** Subvolume id per sandbox (its quota group is 0/id). */
  private readonly ids = new Map<string, number>();
  /** Ready pool entries: name under poolDir -> subvolume id. */
  private readonly ready = new Map<string, number>();
  private filling = 0;
  private refillAfter = 0;
  private seq = 0;
  private closed = false;
  private cached?: { usage: StoreUsage; at: number };
  private readonly log: Logger | undefined;

  constructor(private readonly o: BtrfsStoreOptions) {
    this.path = storePath(o.dataDir);
    this.image = join(o.dataDir, 'store.img');
    this.sandboxesDir = join(this.path, 'sandboxes');
    this.poolDir = join(this.path, 'pool');
    this.snapshotsDir = join(this.path, 'snapshots');
    this.clonesDir = join(this.path, 'clones');
    this.volumesDir = join(this.path, 'volumes');
    this.log = o.log?.child({ component: 'storage' });
  }

  /** Mounts (or finds mounted) the store, enables quota groups, learns the subvolumes already there. */
  async open(): Promise<void> {
    await mkdir(this.path, { recursive: true });
    if ((await statfs(this.path)).type === BTRFS_MAGIC) {
      // Mounted already (a restart): the image's loop mount, or the nosuid bind of a btrfs data dir.
      this.kind = (await exists(this.image)) && (await mountSource(this.path)) !== undefined ? 'loop' : 'btrfs';
    } else {
      if ((await statfs(this.o.dataDir)).type === BTRFS_MAGIC) {
        this.kind = 'btrfs';
      } else {
        await this.mountImage();
        this.kind = 'loop';
      }
    }
    await secureMount(this.path, this.kind === 'btrfs', (argv) => this.run(argv));
    // 0700 like the ns driver's sandboxes dir: what root inside a sandbox makes (setuid files,
    // secrets) in its upper dir is nobody's on the host but root's.
    for (const d of [this.path, this.sandboxesDir, this.poolDir, this.snapshotsDir, this.clonesDir, this.volumesDir]) {
      await mkdir(d, { recursive: true, mode: 0o700 });
      await chmod(d, 0o700);
    }
    this.fsid = await this.findFsid();
    if (!(await exists(join('/sys/fs/btrfs', this.fsid, 'qgroups')))) await this.store(['quota', this.path]);
    await this.learnIds();
    // Clones are cheap to make again: none is trusted across a restart.
    for (const name of await readdir(this.clonesDir)) await this.removeDir(join(this.clonesDir, name));
    await this.usage();
    this.closed = false;
    this.refill();
    this.log?.info({ kind: this.kind, path: this.path, subvolumes: this.ids.size, pooled: this.ready.size }, 'sandbox store open');
  }

  /**
   * Graceful: stays mounted while sandboxes' layers live there, else unmounted with the image kept
   * (kept snapshots and the pool are in it; open() mounts it again). destroy: unmounted and the image deleted.
   */
  async close(opts: { destroy: boolean }): Promise<void> {
    this.closed = true;
    if (!opts.destroy && this.ids.size > 0) return;
    while (this.filling > 0 || this.cloning.size > 0) await new Promise((r) => setTimeout(r, 10));
    if (this.kind !== 'loop') {
      if (!opts.destroy) return;
      for (const name of this.ready.keys()) await this.removeDir(join(this.poolDir, name));
      this.ready.clear();
      for (const id of await this.kept()) await this.drop(id);
      // The nosuid,nodev bind (mounts.ts secureMount); what it showed stays in the data dir.
      const r = await this.o.helper.run(['umount', this.path]);
      if (r.exitCode !== 0) this.log?.warn({ path: this.path, err: r.stderr.trim() }, 'the store bind mount stays');
      return;
    }
    // Volumes and template layers outlive a destroy: the image that holds them stays (unmounted), named in the log.
    const volumes = await namesOrNone(this.volumesDir);
    const layers = await namesOrNone(join(storeLayersPath(this.o.dataDir), 'sha256'));
    if (opts.destroy && volumes.length + layers.length > 0) {
      this.log?.info(
        { image: this.image, volumes: volumes.length, layers: layers.length },
        'the store image stays: it holds volumes (cubectl volume rm) or template layers (cubectl template rm)',
      );
      opts = { destroy: false };
    }
    const r = await this.o.helper.run(['umount', this.path]);
    if (r.exitCode !== 0 && !opts.destroy) {
      // Something still holds it (a process of ours outside the sandboxes, say): it stays, as it did.
      this.log?.warn({ path: this.path, err: r.stderr.trim() }, 'the store stays mounted');
      return;
    }
    if (r.exitCode !== 0 && !/not mounted/.test(r.stderr)) throw new CubeError('INTERNAL', `unmounting the store ${this.path}: ${r.stderr.trim()}`);
    if (opts.destroy) await rm(this.image, { force: true });
    this.kind = undefined;
    // The loop device (autoclear) is released by the kernel after the unmount, once in-flight
    // discards are through: 1-10 s seen under load after a large delete.
    for (let i = 0; i < 300 && (await loopDevicesOf(this.image)).length > 0; i++) await new Promise((res) => setTimeout(res, 50));
    const left = await loopDevicesOf(this.image);
    // Still attached: the filesystem lives on in another mount namespace that copied the mount
    // (another cubed's helper before its refresh, a process that unshared its mounts), and the
    // kernel frees the device when that copy goes. Named so that it can be found.
    if (left.length > 0)
      this.log?.warn({ image: this.image, devices: left, pinnedBy: await mountHolders(left) }, 'the store image is unmounted here but still in use elsewhere');
  }

  /**
   * The sandbox's subvolume, with empty upper/ and work/, taken from the pool (made on the spot
   * when the pool is dry). No limit yet: the caller sets it (cube-launch create -q, or limit()).
   */
  async take(sandboxID: string): Promise<string> {
    const dir = this.dir(sandboxID);
    const first = this.ready.entries().next();
    if (!first.done) {
      const [name, id] = first.value;
      this.ready.delete(name);
      this.refill();
      const taken = await rename(join(this.poolDir, name), dir).then(
        () => true,
        (e: NodeJS.ErrnoException) => {
          if (e.code === 'ENOENT') return false; // gone meanwhile (another store on the same data dir)
          throw this.failure(`taking a pooled subvolume for ${sandboxID}`, e.message);
        },
      );
      if (taken) {
        this.ids.set(sandboxID, id);
        return dir;
      }
    }
    this.refill();
    this.ids.set(sandboxID, await this.make(dir, 0, `creating the subvolume of ${sandboxID}`));
    return dir;
  }

  /** A limited subvolume made now (one helper round trip): `limitBytes` of data and metadata of its own at most. */
  async create(sandboxID: string, limitBytes: number): Promise<string> {
    const dir = this.dir(sandboxID);
    this.ids.set(sandboxID, await this.make(dir, limitBytes, `creating the subvolume of ${sandboxID}`));
    return dir;
  }

  /**
   * The sandbox's subvolume made from the kept snapshot `snapshotID`: a writable snapshot of it
   * (0.3 ms of ioctl whatever it holds). No limit unless `limitBytes` is given (the ns driver sets
   * it with cube-launch create -q, like take()); the limit counts what the sandbox writes, not
   * what it shares with the snapshot.
   */
  async takeFrom(snapshotID: string, sandboxID: string, limitBytes = 0): Promise<string> {
    const dir = this.dir(sandboxID);
    const ready = this.clones.get(snapshotID);
    const first = ready?.entries().next();
    if (ready && first && !first.done) {
      const [name, id] = first.value;
      ready.delete(name);
      const taken = await rename(join(this.clonesDir, name), dir).then(
        () => true,
        (e: NodeJS.ErrnoException) => {
          if (e.code === 'ENOENT') return false; // dropped with its snapshot meanwhile
          throw this.failure(`taking a clone of ${snapshotID} for ${sandboxID}`, e.message);
        },
      );
      if (taken) {
        this.ids.set(sandboxID, id);
        if (limitBytes > 0) await this.store(['limit', dir, String(Math.floor(limitBytes))]);
        return dir;
      }
    }
    this.ids.set(sandboxID, await this.clone(snapshotID, dir, `creating ${sandboxID} from snapshot ${snapshotID}`, limitBytes));
    return dir;
  }

  /** A writable snapshot of a kept one at `dir` with the exclusive limit `limitBytes` (0: none); its subvolume id. */
  private async clone(snapshotID: string, dir: string, what: string, limitBytes = 0): Promise<number> {
    const r = await this.o.helper.store(['snapshot', this.keptDir(snapshotID), dir, String(Math.floor(limitBytes))]);
    if (r.exitCode !== 0) {
      if (/No such file or directory/.test(r.stderr)) throw new CubeError('NOT_FOUND', `snapshot ${snapshotID} is not in the store of this node`);
      throw this.failure(what, r.stderr);
    }
    return Number(r.stdout.trim());
  }

  /**
   * Tops up the snapshot's ready clones, one at a time, in the background. Called by the driver
   * once a create from it is done: a clone's commit during the create slowed it by 7 ms (load 20).
   */
  refillClones(snapshotID: string): void {
    if (this.closed || this.cloning.has(snapshotID)) return;
    const ready = this.clones.get(snapshotID) ?? new Map<string, number>();
    if (ready.size >= CLONE_TARGET) return;
    this.clones.set(snapshotID, ready);
    this.cloning.add(snapshotID);
    const name = `${snapshotID}.${(this.seq++).toString(36)}`;
    this.clone(snapshotID, join(this.clonesDir, name), 'refilling snapshot clones').then(
      (id) => {
        this.cloning.delete(snapshotID);
        // Dropped meanwhile: the clone goes too.
        if (this.clones.get(snapshotID) !== ready) return void this.removeDir(join(this.clonesDir, name)).catch(() => undefined);
        ready.set(name, id);
        this.refillClones(snapshotID);
      },
      (err: unknown) => {
        this.cloning.delete(snapshotID);
        this.log?.warn({ err, snapshotID }, 'snapshot clone refill failed; the next create makes its own');
      },
    );
  }

  /** Keeps a read-only snapshot of the sandbox's subvolume as `snapshotID` (one ioctl, no copy). */
  async keep(sandboxID: string, snapshotID: string): Promise<void> {
    const r = await this.o.helper.store(['keep', this.dir(sandboxID), this.keptDir(snapshotID)]);
    if (r.exitCode !== 0) throw this.failure(`snapshotting ${sandboxID} as ${snapshotID}`, r.stderr);
  }

  /** Deletes a kept snapshot and its ready clones. Idempotent. */
  async drop(snapshotID: string): Promise<void> {
    const ready = this.clones.get(snapshotID);
    this.clones.delete(snapshotID);
    for (const name of ready?.keys() ?? []) await this.removeDir(join(this.clonesDir, name));
    await this.removeDir(this.keptDir(snapshotID));
  }

  /** Ids of the kept snapshots. */
  async kept(): Promise<string[]> {
    return namesOrNone(this.snapshotsDir);
  }

  private keptDir(snapshotID: string): string {
    return join(this.snapshotsDir, snapshotID);
  }

  /** Deletes the sandbox's subvolume. Idempotent. */
  async remove(sandboxID: string): Promise<void> {
    await this.removeDir(this.dir(sandboxID));
    this.ids.delete(sandboxID);
  }

  /** A subvolume delete (a plain directory left by an older layout: removed by rm, off the event loop). */
  private async removeDir(dir: string): Promise<void> {
    const r = await this.o.helper.store(['delete', dir]);
    if (r.exitCode === EXIT_NOT_SUBVOL) await rm(dir, { recursive: true, force: true });
    else if (r.exitCode !== 0) throw new CubeError('DESTROY_FAILED', `deleting the subvolume ${dir}: ${r.stderr.trim()}`);
  }

  /**
   * A volume's subvolume at volumesDir/`name`, empty, its quota group limited to `limitBytes` (data
   * and metadata), its root owned by `owner` (on-disk ids, as files of sandboxes are). Its id.
   */
  async makeVolume(name: string, limitBytes: number, owner: { uid: number; gid: number }): Promise<number> {
    const dir = join(this.volumesDir, name);
    const r = await this.o.helper.store(['subvol', dir, String(Math.floor(limitBytes))]);
    if (r.exitCode !== 0) throw this.failure(`creating the volume ${name}`, r.stderr);
    try {
      await chown(dir, owner.uid, owner.gid);
      await chmod(dir, 0o755);
    } catch (e) {
      await this.removeDir(dir).catch((err: unknown) => this.log?.warn({ err, dir }, 'could not remove a half-made volume'));
      throw this.failure(`creating the volume ${name}`, (e as Error).message);
    }
    return Number(r.stdout.trim());
  }

  /** Deletes a volume's subvolume (whatever it holds: the kernel's cleaner drops the tree). Idempotent. */
  async removeVolume(name: string): Promise<void> {
    await this.removeDir(join(this.volumesDir, name));
  }

  /** Names of the volumes' subvolumes. */
  async volumeNames(): Promise<string[]> {
    return namesOrNone(this.volumesDir);
  }

  /** Exclusive bytes of a subvolume by its id (its quota group), undefined when unknown. */
  async exclusiveBytes(subvolumeID: number): Promise<number | undefined> {
    if (!this.fsid) return undefined;
    const text = await readTextOrAbsent(join('/sys/fs/btrfs', this.fsid, 'qgroups', `0_${subvolumeID}`, 'exclusive'));
    return text === undefined ? undefined : Number(text.trim());
  }

  /** Subvolume ids of `dirs` (0 for one that is not a subvolume). */
  async subvolumeIDs(dirs: string[]): Promise<number[]> {
    if (!dirs.length) return [];
    return (await this.store(['ids', ...dirs])).trim().split('\n').map(Number);
  }

  /** The store's block devices ("MAJ:MIN", whole disks): where sandboxes' I/O is limited. */
  async devices(): Promise<string[]> {
    if (!this.fsid) throw new Error('sandbox store not open');
    return btrfsDevices(this.fsid);
  }

  /** Subvolumes ready in the pool. */
  get pooled(): number {
    return this.ready.size;
  }

  // Tops the pool up in the background, a few makes at a time; a failure (a full store) pauses it.
  private refill(): void {
    while (
      !this.closed &&
      this.kind &&
      this.filling < POOL_REFILL_CONCURRENCY &&
      this.ready.size + this.filling < POOL_TARGET &&
      Date.now() >= this.refillAfter
    ) {
      this.filling++;
      const name = `p${process.pid.toString(36)}-${Date.now().toString(36)}-${(this.seq++).toString(36)}`;
      this.make(join(this.poolDir, name), 0, 'refilling the store pool').then(
        (id) => {
          this.filling--;
          this.ready.set(name, id);
          this.refill();
        },
        (err: unknown) => {
          this.filling--;
          this.refillAfter = Date.now() + POOL_RETRY_MS;
          this.log?.warn({ err }, 'store pool refill failed; retrying later');
        },
      );
    }
  }

  /** A subvolume with empty upper/ and work/; its id. */
  private async make(dir: string, limitBytes: number, what: string): Promise<number> {
    const r = await this.o.helper.store(['subvol', dir, String(Math.floor(limitBytes))]);
    if (r.exitCode !== 0) throw this.failure(what, r.stderr);
    try {
      await Promise.all([mkdir(join(dir, 'upper')), mkdir(join(dir, 'work'))]);
    } catch (e) {
      // The mkdir's error is the one to report; a subvolume left behind is named in the log.
      await this.removeDir(dir).catch((err: unknown) => this.log?.warn({ err, dir }, 'could not remove a half-made subvolume'));
      throw this.failure(what, (e as Error).message);
    }
    return Number(r.stdout.trim());
  }

  dir(sandboxID: string): string {
    return join(this.sandboxesDir, sandboxID);
  }
  /** The sandbox's overlay upper dir (its writable layer), in its subvolume. */
  upperDir(sandboxID: string): string {
    return join(this.dir(sandboxID), 'upper');
  }

  /**
   * The sandbox's writable layer as a tree of its own at `dest` (a new path in the store: the layer
   * store's scratch), for a template build step: a writable snapshot of the sandbox's subvolume (one
   * ioctl and a commit whatever the step wrote; a byte copy of a 1 GiB step took 800 s), then the
   * upper dir's entries renamed to the snapshot's root (renames inside one subvolume, no data
   * moved), work/ dropped, and the root given the upper dir's mode and owner (what overlay shows
   * for /). The caller has frozen the sandbox. A failure leaves nothing at `dest`.
   */
  async captureUpper(sandboxID: string, dest: string): Promise<void> {
    const r = await this.o.helper.store(['snapshot', this.dir(sandboxID), dest, '0']);
    if (r.exitCode !== 0) throw this.failure(`snapshotting the writable layer of ${sandboxID}`, r.stderr);
    try {
      // Aside first: the layer may have top-level entries named upper or work of its own.
      const upper = join(dest, `.cube-upper-${process.pid}-${(this.seq++).toString(36)}`);
      await rename(join(dest, 'upper'), upper);
      await rm(join(dest, 'work'), { recursive: true, force: true });
      for (const name of await readdir(upper)) await rename(join(upper, name), join(dest, name));
      const st = await stat(upper);
      await rmdir(upper);
      await chown(dest, st.uid, st.gid);
      await chmod(dest, st.mode & 0o7777);
    } catch (e) {
      await this.removeDir(dest).catch((err: unknown) => this.log?.warn({ err, dest }, 'could not remove a half-made layer capture'));
      throw this.failure(`capturing the writable layer of ${sandboxID}`, (e as Error).message);
    }
  }

  /** Sandbox ids that have a directory in the store. */
  async list(): Promise<string[]> {
    return namesOrNone(this.sandboxesDir);
  }

  /** Size and free space of the store (one statfs; remembered for assertRoom). */
  async usage(): Promise<StoreUsage> {
    const s = await statfs(this.path);
    const usage: StoreUsage = {
      kind: this.kind ?? 'btrfs',
      path: this.path,
      sizeBytes: s.blocks * s.bsize,
      freeBytes: s.bavail * s.bsize,
      usedPercent: usedPercentOf(s),
    };
    this.cached = { usage, at: Date.now() };
    return usage;
  }

  /**
   * Exclusive bytes of each sandbox's subvolume, from the quota groups in sysfs
   * (/sys/fs/btrfs/FSID/qgroups/0_ID/exclusive): one small file read each, no spawn.
   */
  async diskUsed(sandboxIDs: Iterable<string>): Promise<Map<string, number>> {
    const out = new Map<string, number>();
    await Promise.all(
      [...sandboxIDs].map(async (id) => {
        const sub = this.ids.get(id);
        if (!sub || !this.fsid) return;
        const text = await readTextOrAbsent(join('/sys/fs/btrfs', this.fsid, 'qgroups', `0_${sub}`, 'exclusive'));
        if (text !== undefined) out.set(id, Number(text.trim()));
      }),
    );
    return out;
  }

  /**
   * Refuses a new sandbox when the store itself is about full (503 with the numbers). Checks the
   * usage last read (at most USAGE_MAX_AGE_MS old, refreshed in the background): no syscall waited for.
   */
  assertRoom(): void {
    if (!this.cached || Date.now() - this.cached.at > USAGE_MAX_AGE_MS) void this.usage().catch(() => undefined); // a failed read keeps the last figure; the next call tries again
    const u = this.cached?.usage;
    if (u && u.freeBytes < STORE_MIN_FREE_BYTES) {
      throw new CubeError(
        'STORE_FULL',
        `sandbox store ${u.path} is full: ${mib(u.freeBytes)} MiB free of ${mib(u.sizeBytes)} MiB (at least ${mib(STORE_MIN_FREE_BYTES)} MiB needed)`,
        { retryAfter: 5 },
      );
    }
  }

  private failure(what: string, stderr: string): CubeError {
    const msg = `${what}: ${stderr.trim()}`;
    return isFullError(stderr)
      ? new CubeError('STORE_FULL', `sandbox store ${this.path} is full: ${msg}`, { retryAfter: 5 })
      : new CubeError('CREATE_FAILED', msg);
  }

  private async store(argv: string[]): Promise<string> {
    const r = await this.o.helper.store(argv);
    if (r.exitCode !== 0) throw new CubeError('INTERNAL', `store ${argv[0]}: ${r.stderr.trim()}`);
    return r.stdout;
  }

  private async run(argv: string[]): Promise<void> {
    const r = await this.o.helper.run(argv);
    if (r.exitCode !== 0) throw new CubeError('INTERNAL', `${argv.join(' ')}: ${r.stderr.trim() || `exit ${r.exitCode}`}`);
  }

  private async mountImage(): Promise<void> {
    const fresh = !(await exists(this.image));
    if (fresh) {
      const free = await statfs(this.o.dataDir);
      const size = imageBytes(this.o.imageGiB, free.bavail * free.bsize);
      const f = await open(this.image, 'wx', 0o600);
      try {
        await f.truncate(size); // sparse: the host gives blocks only as sandboxes write
      } finally {
        await f.close();
      }
      try {
        // Mixed block groups, single profile: the default DUP metadata on one device stores every
        // metadata block twice while qgroups count it once (issue 29: a file flood under a 64 MiB
        // quota cost 128 MiB of store; mixed single, 65 MiB). Mixed, not separate single groups:
        // with those, data chunks took all unallocated space once a writer filled the store, and
        // with 100 MiB still free no subvolume, directory or file could be made (the metadata
        // group, 8 MiB, could not grow). A store made before keeps its profile.
        await this.run(['mkfs.btrfs', '-q', '-L', 'cube-store', '--mixed', '-m', 'single', '-d', 'single', this.image]);
      } catch (e) {
        await rm(this.image, { force: true });
        throw e;
      }
      this.log?.info({ image: this.image, sizeGiB: Math.round((size / GIB) * 10) / 10 }, 'sandbox store image made');
    }
    await this.run(['mount', '-o', `loop,noatime,${SECURE_OPTIONS.join(',')}`, this.image, this.path]);
  }

  private async findFsid(): Promise<string> {
    const fsid = (await this.store(['fsid', this.path])).trim();
    if (!/^[0-9a-f-]{36}$/.test(fsid)) throw new CubeError('INTERNAL', `store fsid: unexpected answer '${fsid}'`);
    return fsid;
  }

  /** Subvolume ids of the sandboxes and pool entries found at open (a restart re-uses both). */
  private async learnIds(): Promise<void> {
    const sandboxes = await this.list();
    const pool = await readdir(this.poolDir);
    const paths = [...sandboxes.map((id) => this.dir(id)), ...pool.map((n) => join(this.poolDir, n))];
    if (!paths.length) return;
    const ids = (await this.store(['ids', ...paths])).trim().split('\n').map(Number);
    sandboxes.forEach((id, i) => {
      if (ids[i]! > 0) this.ids.set(id, ids[i]!);
    });
    for (const [i, name] of pool.entries()) {
      const dir = join(this.poolDir, name);
      const id = ids[sandboxes.length + i]!;
      // A make cut short by a kill -9: finished here, or removed when it is not a subvolume.
      if (id > 0)
        await Promise.all([mkdir(join(dir, 'upper'), { recursive: true }), mkdir(join(dir, 'work'), { recursive: true })]).then(() => this.ready.set(name, id));
      else await this.removeDir(dir);
    }
  }
}

const exists = async (p: string): Promise<boolean> => (await statOrAbsent(p)) !== undefined;
