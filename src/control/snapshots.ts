// Kept sandbox snapshots (E2B createSnapshot, listSnapshots, deleteSnapshot, create from a
// snapshot, fork), the same for both control planes: the state lives on the node that took it
// (ns: a read-only btrfs snapshot of the sandbox's writable layer, no processes), the record in
// the state store. A sandbox made from one is placed on that node, with the snapshot's template,
// runtime, spec, metadata and env unless its request says otherwise.
import type { Logger } from 'pino';
import type { NodeApi } from '../cubelet/types.js';
import { CubeError, toCubeError } from '../errors.js';
import { isSnapshotID, newSnapshotID } from '../ids.js';
import type { CreateSandboxRequest, SandboxRecord, SnapshotRecord } from '../model/sandbox.js';
import type { StateStore } from '../store/types.js';
import { audited } from './admission.js';

export interface SnapshotFilter {
  /** Only those taken from this sandbox. */
  sandboxID?: string;
  /** Only those with this name (or this id). */
  name?: string;
}

/** One fork's outcome: the sandbox, or why it did not start (each fork stands alone). */
export type ForkResult = { sandbox: SandboxRecord } | { error: CubeError };

/** At most this many sandboxes per fork request: each is a full create. */
export const FORK_MAX = 100;

const NAME = /^[A-Za-z0-9][A-Za-z0-9._/-]{0,127}$/;

/** 400 unless `name` is 1-128 letters, digits, '.', '_', '/', '-' starting with a letter or digit (pure). */
export function checkSnapshotName(name: string): void {
  if (!NAME.test(name))
    throw new CubeError(
      'BAD_REQUEST',
      `snapshot name ${JSON.stringify(name)} must be 1-128 letters, digits, '.', '_', '/' or '-', starting with a letter or digit`,
    );
}

/** Whether the record answers to `ref` (its id or one of its names) (pure). */
export function answersTo(rec: SnapshotRecord, ref: string): boolean {
  return rec.snapshotID === ref || rec.names.includes(ref);
}

/**
 * The create request for a sandbox made from `snap` (pure): its template, runtime and node; spec
 * and timeout as asked, else the snapshot's spec; metadata and envVars the snapshot's under the
 * request's.
 */
export function createFromSnapshot(snap: SnapshotRecord, req: CreateSandboxRequest): CreateSandboxRequest {
  if (req.nodeID !== undefined && req.nodeID !== snap.nodeID)
    throw new CubeError('BAD_REQUEST', `snapshot ${snap.snapshotID} is kept on node ${snap.nodeID}; a sandbox made from it cannot be placed on ${req.nodeID}`);
  if (req.runtime !== undefined && req.runtime !== snap.runtime)
    throw new CubeError(
      'BAD_REQUEST',
      `snapshot ${snap.snapshotID} was taken by the ${snap.runtime} runtime; a sandbox made from it cannot run on ${req.runtime}`,
    );
  return {
    ...req,
    templateID: snap.templateID,
    fromSnapshot: snap.snapshotID,
    nodeID: snap.nodeID,
    runtime: snap.runtime,
    cpus: req.cpus ?? snap.spec.cpus,
    memoryMiB: req.memoryMiB ?? snap.spec.memoryMiB,
    diskGiB: req.diskGiB ?? snap.spec.diskGiB,
    metadata: { ...snap.metadata, ...req.metadata },
    envVars: { ...snap.envVars, ...req.envVars },
  };
}

/** What each node keeps against what the records say (pure): data nobody records, records whose data is gone. */
export function strays(kept: string[], records: SnapshotRecord[]): { data: string[]; records: string[] } {
  const recorded = new Set(records.map((r) => r.snapshotID));
  const held = new Set(kept);
  return { data: kept.filter((id) => !recorded.has(id)), records: records.filter((r) => !held.has(r.snapshotID)).map((r) => r.snapshotID) };
}

export interface SnapshotBookOptions {
  store: StateStore;
  /** The node API of a node by id (404/503 when unknown or unreachable). */
  node: (nodeID: string) => Promise<NodeApi>;
  /** The control plane's record of a sandbox (404 when unknown). */
  sandbox: (sandboxID: string) => Promise<SandboxRecord>;
  /** The control plane's create (admission, placement, audit). */
  create: (req: CreateSandboxRequest) => Promise<SandboxRecord>;
  /** Whether some node holds a template of this name (the control plane's node views, no round trip). */
  templateKnown: (name: string) => boolean;
  log: Logger;
}

/** What the API uses. */
export type SnapshotApi = Pick<SnapshotBook, 'take' | 'list' | 'get' | 'remove' | 'fork'>;

export class SnapshotBook {
  constructor(private readonly o: SnapshotBookOptions) {}

  /** Takes a snapshot of the sandbox on its node and records it; nothing is left on the node when the record cannot be written. */
  async take(sandboxID: string, opts: { name?: string; actor?: string } = {}): Promise<SnapshotRecord> {
    const rec = await this.o.sandbox(sandboxID);
    if (opts.name !== undefined) {
      checkSnapshotName(opts.name);
      const taken = (await this.o.store.listSnapshots()).find((s) => answersTo(s, opts.name!));
      if (taken) throw new CubeError('CONFLICT', `snapshot name ${opts.name} is taken by ${taken.snapshotID}`);
      // `Sandbox.create(name)` looks templates up first (forCreate): this snapshot would never be reached by it.
      if (this.o.templateKnown(opts.name)) throw new CubeError('CONFLICT', `snapshot name ${opts.name} is a template's name; choose another`);
    }
    return audited(this.o.store, opts.actor, 'snapshot.create', rec.sandboxID, async () => {
      const node = await this.o.node(rec.nodeID);
      const { env, ...kept } = await node.snapshotSandbox(rec.sandboxID, newSnapshotID());
      const out: SnapshotRecord = { ...kept, names: opts.name !== undefined ? [opts.name] : [], envVars: env };
      try {
        await this.o.store.putSnapshot(out);
      } catch (e) {
        await node
          .deleteSnapshot(out.snapshotID)
          .catch((err: unknown) =>
            this.o.log.warn({ err, snapshotID: out.snapshotID, nodeID: out.nodeID }, 'a snapshot the store could not record stays on its node'),
          );
        throw e;
      }
      return out;
    });
  }

  /**
   * The snapshot a create names: by id (one keyed read), or by name when no node holds a template
   * of that name (E2B's `Sandbox.create(name)` after `createSnapshot({ name })`). A template wins
   * a name both have: a create from a template then costs no store read, and take() refuses a
   * template's name, so only a template made later under a snapshot's name hides that snapshot
   * (still reachable by its id). `NAME:TAG` is never a snapshot's name (no ':').
   */
  async forCreate(templateID: string | undefined): Promise<SnapshotRecord | undefined> {
    if (templateID === undefined) return undefined;
    if (isSnapshotID(templateID)) {
      const snap = await this.o.store.getSnapshot(templateID);
      if (!snap) throw new CubeError('NOT_FOUND', `snapshot ${templateID} not found`);
      return snap;
    }
    if (templateID === 'base' || !NAME.test(templateID) || this.o.templateKnown(templateID)) return undefined;
    return (await this.o.store.listSnapshots()).find((s) => s.names.includes(templateID));
  }

  /** By id or name; 404 when none. */
  async get(ref: string): Promise<SnapshotRecord> {
    const snap = (await this.o.store.getSnapshot(ref)) ?? (await this.o.store.listSnapshots()).find((s) => answersTo(s, ref));
    if (!snap) throw new CubeError('NOT_FOUND', `snapshot ${ref} not found`);
    return snap;
  }

  async list(f: SnapshotFilter = {}): Promise<SnapshotRecord[]> {
    return (await this.o.store.listSnapshots()).filter(
      (s) => (f.sandboxID === undefined || s.sandboxID === f.sandboxID) && (f.name === undefined || answersTo(s, f.name)),
    );
  }

  /**
   * Deletes the node's copy, then the record (a failure on the node keeps the record, so the
   * delete can be retried). Sandboxes made from it keep running: their layers are their own.
   */
  async remove(ref: string, actor?: string): Promise<void> {
    const snap = await this.get(ref);
    await audited(this.o.store, actor, 'snapshot.delete', snap.snapshotID, async () => {
      await (await this.o.node(snap.nodeID)).deleteSnapshot(snap.snapshotID);
      await this.o.store.deleteSnapshot(snap.snapshotID);
    });
  }

  /**
   * At a node's start: deletes the snapshots it keeps that have no record (a daemon killed
   * between the node's snapshot and the record's write) and the records of its snapshots whose
   * data is gone. Returns what it removed.
   */
  async sweep(node: NodeApi): Promise<{ data: string[]; records: string[] }> {
    const mine = (await this.o.store.listSnapshots()).filter((s) => s.nodeID === node.nodeID);
    const s = strays(await node.listSnapshots(), mine);
    for (const id of s.data) await node.deleteSnapshot(id);
    for (const id of s.records) await this.o.store.deleteSnapshot(id);
    return s;
  }

  /**
   * E2B fork: a snapshot of the sandbox, `count` creates from it (concurrently, each succeeding
   * or failing on its own), then the snapshot is deleted: the forks' layers are their own.
   */
  async fork(sandboxID: string, opts: { count: number; timeoutSec?: number; actor?: string }): Promise<ForkResult[]> {
    if (!Number.isInteger(opts.count) || opts.count < 1 || opts.count > FORK_MAX)
      throw new CubeError('BAD_REQUEST', `fork count must be an integer from 1 to ${FORK_MAX} (got ${opts.count})`);
    const snap = await this.take(sandboxID, opts.actor !== undefined ? { actor: opts.actor } : {});
    try {
      const req: CreateSandboxRequest = {
        templateID: snap.snapshotID,
        ...(opts.timeoutSec !== undefined ? { timeoutSec: opts.timeoutSec } : {}),
        ...(opts.actor !== undefined ? { actor: opts.actor } : {}),
      };
      const settled = await Promise.allSettled(Array.from({ length: opts.count }, () => this.o.create(req)));
      return settled.map((r) => (r.status === 'fulfilled' ? { sandbox: r.value } : { error: toCubeError(r.reason) }));
    } finally {
      // A failure here leaves the snapshot listed (and deletable); the forks are made either way.
      await this.remove(snap.snapshotID, opts.actor).catch((err: unknown) =>
        this.o.log.error({ err, snapshotID: snap.snapshotID }, 'fork: deleting its snapshot failed'),
      );
    }
  }
}
