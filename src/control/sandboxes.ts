// Sandbox operations: place and create (with retries on unreachable nodes), get, list, destroy,
// pause, resume, timeout, egress, and the kept snapshots made from sandboxes. Each operation on
// an existing sandbox holds its lock (locks.ts) and writes the node's answer over its record.
import type { NodeApi } from '../cubelet/types.js';
import { CubeError, toCubeError } from '../errors.js';
import { newSandboxID, newToken } from '../ids.js';
import type { NodeView } from '../model/node.js';
import {
  secretsOf,
  type AnswerHook,
  type CreateSandboxRequest,
  type EgressRequest,
  type ListFilter,
  type PauseOptions,
  type SandboxRecord,
  type SandboxView,
} from '../model/sandbox.js';
import { schedule } from '../scheduler/pipeline.js';
import { audit, audited, checkTimeout, refusalError, refusalOf, refusalRule, requireFits, requireTemplate, resolveCreate, resumeRefusal } from './admission.js';
import type { RecentPlacement } from './cluster/node-views.js';
import type { ControlContext } from './context.js';
import { listedName } from '../model/template.js';
import { isoTime } from '../model/time.js';
import type { ControlDeath } from './control-plane.js';
import type { Deaths } from './deaths.js';
import type { CreateStats } from './create-stats.js';
import type { KeyBook } from './keys.js';
import type { SandboxLocks } from './locks.js';
import type { Nodes } from './nodes.js';
import { createFromSnapshot, SnapshotBook } from './snapshots.js';
import { placedForVolumes, VolumeBook } from './volumes.js';
import type { WatchStream } from './watch.js';
import { CreateKeys, createKeyOf } from './create-keys.js';
import { CREATING_GRACE_MS, settleCreate, SETTLE_EVERY_MS, SETTLE_LEASE, staleCreates, undoCreate, type OutcomeDeps } from './create-outcomes.js';

/** Nodes a create tries before it gives up on unreachable ones (130596). */
const CREATE_ATTEMPTS = 3;

export class SandboxOps {
  readonly snapshots: SnapshotBook;
  readonly volumes: VolumeBook;
  /** Idempotent creates by the client's key (create-keys.ts); `keys` are the API keys' quotas. */
  private readonly createKeys: CreateKeys;
  /** What create-outcomes.ts needs of the control plane (the heartbeat reconcile uses it too). */
  readonly outcomes: OutcomeDeps;
  private settledAt = 0;
  private settling?: Promise<void>;

  constructor(
    private readonly ctx: ControlContext,
    private readonly nodes: Nodes,
    private readonly locks: SandboxLocks,
    private readonly watch: WatchStream,
    private readonly stats: CreateStats,
    private readonly keys: KeyBook,
    private readonly deaths: Deaths,
  ) {
    this.snapshots = new SnapshotBook({
      store: ctx.store,
      node: (nodeID) => nodes.nodeApi(nodeID),
      sandbox: (id) => this.getSandbox(id),
      create: (req) => this.createSandbox(req),
      templateKnown: (name) => nodes.book.nodeViews().some((n) => n.templates.includes(listedName(name))),
      log: ctx.log,
    });
    this.volumes = new VolumeBook({
      store: ctx.store,
      node: (nodeID) => nodes.nodeApi(nodeID),
      nodeViews: () => nodes.listNodes(),
      sandboxes: async () => (await this.listSandboxes()).filter((s) => s.state !== 'gone'),
      defaultGiB: () => ctx.cfg.config.master.volumes.default_gib,
      log: ctx.log,
    });
    this.createKeys = new CreateKeys(ctx.store, () => this.createDeadlineMs(), ctx.log);
    this.outcomes = {
      store: ctx.store,
      node: (nodeID, fence) => nodes.nodeApi(nodeID, fence),
      withLock: (id, fn) => locks.withLock(id, fn),
      adopt: async (rec, view) => void (await this.record(rec, view)),
      event: (e) => watch.appendEvent(e),
      log: ctx.log,
    };
  }

  /** Settles stale creates (create-outcomes.ts) every SETTLE_EVERY_MS, beside the tick, one run at a time. */
  tick(): void {
    const now = Date.now();
    if (now - this.settledAt < SETTLE_EVERY_MS || this.settling) return;
    this.settledAt = now;
    this.settling = this.settleCreates()
      .catch((err: unknown) => this.ctx.log.warn({ err: toCubeError(err).message }, 'settling stale creates failed'))
      .finally(() => (this.settling = undefined));
  }

  /** `creating` records past their deadline whose creator is gone, settled from the nodes' truth (one replica, under a lease). */
  private async settleCreates(): Promise<void> {
    const { store, replicaID, log } = this.ctx;
    const stale = staleCreates(await store.listSandboxes({ state: ['creating'] }), Date.now(), CREATING_GRACE_MS);
    if (stale.length === 0 || !(await store.holdLease(SETTLE_LEASE, replicaID, 2 * SETTLE_EVERY_MS))) return;
    for (const rec of stale)
      await settleCreate(this.outcomes, rec).catch((err: unknown) =>
        log.warn({ err: toCubeError(err).message, sandboxID: rec.sandboxID }, 'settling a stale create failed'),
      );
  }

  /** Places and creates a sandbox; one create per idempotency key, on any replica (create-keys.ts). */
  async createSandbox(asked: CreateSandboxRequest): Promise<SandboxRecord> {
    const snap = await this.snapshots.forCreate(asked.templateID);
    const req = await this.volumes.forCreate(snap ? createFromSnapshot(snap, asked) : asked);
    const made =
      req.idempotencyKey !== undefined
        ? this.createKeys.run(createKeyOf(req.actor, req.idempotencyKey), (id, moveTo) => this.placeCreate(req, id, moveTo))
        : this.placeCreate(req, newSandboxID());
    return req.volumes?.length ? made.catch((e: unknown) => Promise.reject(placedForVolumes(e, req))) : made;
  }

  /**
   * A node that cannot be reached (it died and is not marked lost yet), or does not answer by the
   * create's deadline (frozen), costs one attempt: the create is placed again without it under a
   * new id, up to CREATE_ATTEMPTS nodes, unless the request pinned its node. What the late node
   * makes of the old id is destroyed when it reports it: its record is deleted, the delete remembered.
   */
  private async placeCreate(req: CreateSandboxRequest, first: string, moveTo?: (sandboxID: string) => Promise<void>): Promise<SandboxRecord> {
    const unreachable = new Set<string>();
    for (let sandboxID = first; ;) {
      try {
        // The key's quota first: a create over it is refused at once, before any placement.
        return await this.keys.claimed(req.actor, sandboxID, resolveCreate(req, this.ctx.cfg.config.master), () =>
          this.createOnce(req, unreachable, sandboxID),
        );
      } catch (e) {
        if (!(e instanceof UnreachableNode)) throw e;
        unreachable.add(e.nodeID);
        if (req.nodeID !== undefined || unreachable.size >= CREATE_ATTEMPTS) throw e.cause;
        this.ctx.log.warn({ nodeID: e.nodeID, err: e.cause.message }, 'create: node unreachable, placing on another');
        sandboxID = newSandboxID();
        await moveTo?.(sandboxID);
      }
    }
  }

  private createDeadlineMs(): number {
    return this.ctx.cfg.config.master.sandbox.create_deadline_sec * 1000;
  }

  private async createOnce(req: CreateSandboxRequest, unreachable: ReadonlySet<string>, sandboxID: string): Promise<SandboxRecord> {
    const { store, log } = this.ctx;
    const book = this.nodes.book;
    const master = this.ctx.cfg.config.master;
    const r = resolveCreate(req, master);
    // One round trip for both (the Redis client pipelines what is sent together).
    const [, inFlight] = await Promise.all([this.nodes.placementViews(true), store.inFlight()]);
    const all = book.nodeViews();
    const nodes = unreachable.size === 0 ? all : all.filter((n) => !unreachable.has(n.nodeID));
    await this.requireTemplate(r.templateID, nodes);
    requireFits(r, nodes, master);
    const candidates = unreachable.size === 0 ? book.withInFlight(inFlight) : book.withInFlight(inFlight).filter((c) => !unreachable.has(c.view.nodeID));
    const d0 = performance.now();
    // fetchable: requireTemplate found the template on some node; nodes lacking it fetch it (templates/fetch.ts).
    const placed = schedule(
      {
        templateID: r.templateID,
        cpus: r.cpus,
        memoryMiB: r.memoryMiB,
        diskGiB: r.diskGiB,
        fetchable: true,
        ...(req.nodeID !== undefined ? { nodeID: req.nodeID } : {}),
        ...(req.runtime !== undefined ? { runtime: req.runtime } : {}),
        ...(req.metadata?.['cube.net_raw'] === 'true' ? { netRaw: true } : {}),
      },
      candidates,
      master,
      Date.now(),
    );
    this.stats.recordDecision(performance.now() - d0);
    const refusal = refusalOf(placed, nodes);
    if (refusal !== undefined || !placed.ok) {
      const message = refusal ?? 'no node available';
      const err = refusalError(placed, message);
      this.stats.recordRefusal(err.code, refusalRule(placed));
      await this.watch.appendEvent({ kind: 'schedule.failed', code: err.code, message: err.message });
      await audit(store, req.actor, 'sandbox.create', r.templateID, message);
      throw err;
    }
    const nodeID = placed.nodeID;
    // Counted from the decision on (synchronously, before any await) so that concurrent decisions see it.
    const placement: RecentPlacement = { nodeID, cpus: r.cpus, memoryMiB: r.memoryMiB, diskGiB: r.diskGiB, at: Infinity };
    book.place(placement);
    const forget = () => book.forget(placement);
    const chosen = nodes.find((n) => n.nodeID === nodeID);
    let node: NodeApi;
    try {
      node = this.ctx.nodes.node(nodeID, chosen?.address);
    } catch (e) {
      forget();
      throw e;
    }
    const now = Date.now();
    const endAt = now + r.timeoutSec * 1000;
    const createBy = now + this.createDeadlineMs();
    const keyed = req.idempotencyKey !== undefined;
    const secrets = {
      accessToken: newToken(),
      envVars: { ...(req.envVars ?? {}) },
      ...(req.allowPublicTraffic === false ? { trafficAccessToken: newToken() } : {}),
    };
    const metadata = { ...(req.metadata ?? {}) };
    // Recorded before the node creates it: a replica dying now leaves a record the node's
    // heartbeats settle (running, or gone), never a sandbox nobody knows of.
    const pending: SandboxRecord = {
      sandboxID,
      templateID: r.templateID,
      nodeID,
      state: 'creating',
      spec: { cpus: r.cpus, memoryMiB: r.memoryMiB, diskGiB: r.diskGiB },
      metadata,
      startedAt: now,
      endAt,
      runtime: chosen?.runtime ?? 'unknown',
      createBy,
      ...(keyed ? { keyed } : {}),
      ...secrets,
      ...(req.actor !== undefined ? { owner: req.actor } : {}),
      // Known while it is made: a volume delete meanwhile is refused (VolumeBook.remove).
      ...(req.volumes?.length ? { volumes: req.volumes } : {}),
    };
    // The sandbox's lock, the record and the in-flight count together: each round trip a create
    // waits for is a wake-up of the control and of the store, which on a loaded machine cost more
    // than the work. The lock is held until the answer is written: a `creating` record whose lock
    // is free has lost its creator (create-outcomes.ts). It is asked first: Redis runs one
    // connection's commands in order, so nobody sees the record before the lock is held.
    const [lock, put, inc] = await Promise.allSettled([this.locks.take(sandboxID), store.putSandbox(pending), store.incInFlight(nodeID)]);
    if (lock.status === 'rejected' || lock.value === undefined || put.status === 'rejected' || inc.status === 'rejected') {
      forget();
      if (inc.status === 'fulfilled')
        await store.decInFlight(nodeID).catch((err: unknown) => log.warn({ err, nodeID }, 'could not uncount a create in flight'));
      // Also when the write failed: the cluster store's MySQL half may have committed before its
      // Redis half failed, and a record left `creating` waits for the settle sweep after its deadline.
      await store.deleteSandbox(sandboxID).catch((err: unknown) => log.warn({ err, sandboxID }, 'could not remove the record of a create that did not begin'));
      if (lock.status === 'fulfilled' && lock.value !== undefined) await store.releaseLock(sandboxID, lock.value).catch(() => undefined); // expires by its lease
      throw put.status === 'rejected'
        ? put.reason
        : inc.status === 'rejected'
          ? inc.reason
          : lock.status === 'rejected'
            ? lock.reason
            : new CubeError('SANDBOX_BUSY', `sandbox ${sandboxID}: its lock is held`, { retryAfter: 1 });
    }
    const release = this.locks.hold(sandboxID, lock.value);
    const pendingGen = put.value;
    const t0 = performance.now();
    let counted = true as boolean; // false once uncount() ran before the finally (the node view counts the sandbox)
    const uncount = () => {
      counted = false;
      return store.decInFlight(nodeID).catch((err: unknown) => log.warn({ err, nodeID }, 'could not uncount a create in flight'));
    };
    // From when the node's views count the sandbox (NodeFeed.sentAt): until then the placement is.
    placement.at = this.ctx.feed.sentAt();
    try {
      if (req.signal?.aborted && !keyed) throw new CubeError('BAD_REQUEST', 'the client closed its connection before the create began');
      const view = await node.createSandbox({
        sandboxID,
        templateID: r.templateID,
        cpus: r.cpus,
        memoryMiB: r.memoryMiB,
        diskGiB: r.diskGiB,
        endAt,
        env: secrets.envVars,
        metadata,
        deadline: createBy,
        ...(req.egress ? { egress: req.egress } : {}),
        ...(req.lifecycle ? { lifecycle: req.lifecycle } : {}),
        ...(req.actor !== undefined ? { owner: req.actor } : {}),
        ...(req.runtime !== undefined ? { runtime: req.runtime } : {}),
        ...(req.fromSnapshot !== undefined ? { fromSnapshot: req.fromSnapshot } : {}),
        ...(req.volumes?.length ? { volumes: req.volumes } : {}),
      });
      // Over the pending record (or a heartbeat's update of it); a destroy that came meanwhile
      // wins, and the node's copy goes.
      // An unkeyed create's deadline stays on the record (SandboxRecord.createBy) until its answer
      // is in the client's socket (answered() below): kill -9 of a replica mid-burst left sandboxes
      // no client had heard of, 2 of 12 whose MySQL commit landed after their writer died, and 1 of
      // 12 whose record was marked answered in the store before its answer was written
      // (test/cluster/outcomes.test.ts).
      const rec = await this.writeOver({ ...view, ...secrets, ...this.nodes.nodeStamp(view), ...(keyed ? {} : { createBy }) }, pendingGen);
      if (!rec) throw new CubeError('NOT_FOUND', `sandbox ${sandboxID} was destroyed while it was being created`);
      // Nobody is left to hear this answer, and without a key nobody can ask for it again.
      if (req.signal?.aborted && !keyed) {
        await undoCreate(
          this.outcomes,
          rec,
          node,
          `the client closed its connection before the answer (after ${((Date.now() - now) / 1000).toFixed(1)} s), and the create carried no idempotency key to adopt it by`,
        );
        throw new CubeError('NOT_FOUND', `sandbox ${sandboxID}: the client left before the answer; undone`);
      }
      // The node's clock, like the lastSeen it is compared with: the control's own clock after the
      // answer would count the sandbox twice (heartbeat and placement) for a heartbeat interval.
      placement.at = view.startedAt || Date.now();
      this.stats.record(performance.now() - t0);
      // Answered at once, the audit row and the count behind it: a replica killed between the
      // record's `running` and its answer leaves a sandbox no client heard of, which nothing
      // undoes (only `creating` records are settled), so nothing else waits in between. An
      // awaited audit write kept that window open for a MySQL commit (the cluster test's kill -9
      // of a replica mid-creates once left 2 sandboxes no client held: test/cluster/outcomes.test.ts).
      void audit(store, req.actor, 'sandbox.create', sandboxID, 'ok', { templateID: r.templateID, cpus: r.cpus, memoryMiB: r.memoryMiB, nodeID }).catch(
        (err: unknown) => log.warn({ err: toCubeError(err).message, sandboxID }, 'audit of a create failed'),
      );
      void uncount();
      if (!keyed) await this.answered(rec, node, req.answer);
      return rec;
    } catch (e) {
      forget();
      // The node may have finished after we gave up on it: the deleted record makes the next
      // heartbeat destroy it there.
      await store.deleteSandbox(sandboxID).catch((err: unknown) => log.error({ err, sandboxID }, 'could not mark a failed create deleted'));
      // Not waited for: a frozen node answers nothing, and the create goes on to another node now.
      void node.destroySandbox(sandboxID).catch(() => undefined); // the deleted record destroys it at the node's next report
      await audit(store, req.actor, 'sandbox.create', sandboxID, toCubeError(e).message, { nodeID }).catch((err: unknown) =>
        log.warn({ err, sandboxID }, 'could not audit a failed create'),
      );
      // Unreachable: it never answered, so the create may be tried on another node.
      if (e instanceof CubeError && e.kind === 'NODE_UNREACHABLE') throw new UnreachableNode(nodeID, e);
      throw e;
    } finally {
      if (counted) await uncount();
      void release();
    }
  }

  /**
   * 404 only when no node holds the template. Nodes whose reports are missing (Redis came back
   * empty and they have not heartbeat since) may hold it: the template registry in MySQL says,
   * and the answer is then a retryable 503, never a 404 for a template that exists.
   */
  private async requireTemplate(templateID: string, nodes: NodeView[]): Promise<void> {
    try {
      requireTemplate(templateID, nodes);
    } catch (e) {
      const holders = (await this.ctx.store.listTemplates()).find((t) => t.templateID === templateID)?.nodes ?? [];
      const waiting = holders.filter((id) => nodes.some((n) => n.nodeID === id && !n.lost));
      if (waiting.length === 0) throw e;
      throw new CubeError(
        'STATE_UNAVAILABLE',
        `template ${templateID} is on ${waiting.join(', ')}, whose reports are not in yet (the live store restarted); retry`,
        { retryAfter: 1 },
      );
    }
  }

  async getSandbox(sandboxID: string): Promise<SandboxRecord> {
    const rec = await this.ctx.store.getSandbox(sandboxID);
    if (!rec || rec.state === 'gone') throw await this.deaths.notFound(sandboxID);
    return rec;
  }

  listSandboxes(filter?: ListFilter): Promise<SandboxRecord[]> {
    return this.ctx.store.listSandboxes(filter);
  }

  async destroySandbox(sandboxID: string, actor?: string, death?: ControlDeath): Promise<void> {
    const rec = await this.getSandbox(sandboxID);
    await audited(this.ctx.store, actor, 'sandbox.destroy', sandboxID, () =>
      this.locks.locked(sandboxID, async (fence) => {
        // Remembered first, in the durable store: an error before this means nothing was done
        // (the sandbox runs on), success means it will be done. The node destroys it now, or,
        // if it cannot (unreachable, down, lost, a failed destroy), when it next lists the
        // sandbox: the history holds the record as deleted and the reconcile destroys it.
        // Its death (or what it was, for its lifecycle events derived after the record went:
        // lifecycle/index.ts) before the record goes, so a call on it meanwhile finds one or the other.
        if (death)
          await this.deaths.bury(
            { sandboxID, nodeID: rec.nodeID, at: Date.now(), reason: death.reason, message: death.message, ...(actor !== undefined ? { by: actor } : {}) },
            rec,
          );
        else
          await this.ctx.store.lifecycle.putEndedSandbox({
            sandboxID,
            at: Date.now(),
            templateID: rec.templateID,
            metadata: rec.metadata,
            ...(rec.owner !== undefined ? { owner: rec.owner } : {}),
          });
        await this.ctx.store.deleteSandbox(sandboxID);
        // Views older than this still count a sandbox holding its full share (not a paused one).
        // Read right at the call: an in-process node stops counting it before its first await, and
        // a view read during the node lookup above still counted it.
        let sentAt: number | undefined;
        const failed = await this.nodes
          .nodeApi(rec.nodeID, fence)
          .then((n) => {
            sentAt = rec.state === 'running' ? this.ctx.feed.destroySentAt() : undefined;
            return n.destroySandbox(sandboxID);
          })
          .then(
            () => undefined,
            (e: unknown) => toCubeError(e),
          );
        if (!failed && sentAt !== undefined)
          this.nodes.book.release({
            nodeID: rec.nodeID,
            cpus: rec.spec.cpus,
            memoryMiB: rec.spec.memoryMiB,
            diskGiB: rec.spec.diskGiB,
            at: sentAt,
            removed: true,
          });
        if (failed && failed.kind !== 'NOT_FOUND')
          await this.watch
            .appendEvent({
              kind: 'sandbox.destroyed',
              nodeID: rec.nodeID,
              sandboxID,
              message: `sandbox ${sandboxID} deleted; node ${rec.nodeID} could not destroy it now (${failed.message}): destroyed there when it next reports it`,
            })
            .catch((err: unknown) => this.ctx.log.warn({ err, sandboxID }, 'could not record a deferred destroy'));
      }),
    );
  }

  /**
   * Whether a client's delete of this sandbox was accepted: remembered (its ended record, written
   * before the record goes) and its record gone, with no death before it. A repeat of that delete
   * is answered done again, never 404: its first answer may have been lost, or an error that came
   * after the delete was remembered (a MySQL commit lands even when its writer sees the connection
   * drop). Its owner, for the caller's check.
   */
  async deleteAccepted(sandboxID: string): Promise<{ owner?: string } | undefined> {
    const l = this.ctx.store.lifecycle;
    const [live, ended, death] = await Promise.all([this.ctx.store.getSandbox(sandboxID), l.getEndedSandbox(sandboxID), l.getTombstone(sandboxID)]);
    if ((live && live.state !== 'gone') || !ended || death) return undefined;
    return ended.owner !== undefined ? { owner: ended.owner } : {};
  }

  async pauseSandbox(sandboxID: string, actor?: string, opts?: PauseOptions): Promise<SandboxRecord> {
    const rec = await this.getSandbox(sandboxID);
    return audited(this.ctx.store, actor, 'sandbox.pause', sandboxID, () =>
      this.locks.locked(sandboxID, async (fence) => this.record(rec, await (await this.nodes.nodeApi(rec.nodeID, fence)).pauseSandbox(sandboxID, opts))),
    );
  }

  async resumeSandbox(sandboxID: string, timeoutSec?: number, actor?: string): Promise<{ sandbox: SandboxRecord; resumed: boolean }> {
    const { store, cfg } = this.ctx;
    if (timeoutSec !== undefined) checkTimeout(timeoutSec, cfg.config.master);
    const rec = await this.getSandbox(sandboxID);
    const address = (await this.nodes.nodeRecord(rec.nodeID)).address;
    return this.locks.locked(sandboxID, async (fence) => {
      const node = this.ctx.nodes.node(rec.nodeID, address, fence);
      let view: SandboxView | undefined;
      let resumed = false;
      // The record may lag the node by a heartbeat: a pause at the sandbox's timeout that the
      // node began just now shows `running` or `pausing` here. The node's state decides, and its
      // resume waits for a pause in progress (setting the timeout of a pausing sandbox answered 503).
      const state = rec.state === 'paused' ? rec.state : (await node.getSandbox(sandboxID))?.state;
      if (state === 'paused' || state === 'pausing') {
        const refusal = resumeRefusal(rec.spec, await node.nodeView(), cfg.config.master);
        if (refusal !== undefined) {
          this.stats.recordRefusal(130409, 'release_ratio');
          await audit(store, actor, 'sandbox.resume', sandboxID, refusal);
          throw new CubeError('CONFLICT', refusal);
        }
        view = await audited(store, actor, 'sandbox.resume', sandboxID, () =>
          this.keys.claimed(rec.owner, sandboxID, rec.spec, () => node.resumeSandbox(sandboxID)),
        );
        resumed = true;
      }
      if (timeoutSec !== undefined) view = await node.setEndAt(sandboxID, Date.now() + timeoutSec * 1000);
      view ??= await node.getSandbox(sandboxID);
      if (!view) throw new CubeError('NOT_FOUND', `sandbox ${sandboxID} not found on node ${rec.nodeID}`);
      return { sandbox: await this.record(rec, view), resumed };
    });
  }

  async setTimeout(sandboxID: string, timeoutSec: number): Promise<SandboxRecord> {
    checkTimeout(timeoutSec, this.ctx.cfg.config.master, 1);
    const rec = await this.getSandbox(sandboxID);
    const out = await this.locks.locked(sandboxID, async (fence) =>
      this.record(rec, await (await this.nodes.nodeApi(rec.nodeID, fence)).setEndAt(sandboxID, Date.now() + timeoutSec * 1000)),
    );
    // E2B's sandbox.lifecycle.updated (set_timeout).
    await this.watch.appendEvent({ kind: 'sandbox.updated', nodeID: out.nodeID, sandboxID, message: `timeout set: ends at ${isoTime(out.endAt)}` });
    return out;
  }

  async setEgress(sandboxID: string, req: EgressRequest): Promise<SandboxRecord> {
    const rec = await this.getSandbox(sandboxID);
    return this.locks.locked(sandboxID, async (fence) => this.record(rec, await (await this.nodes.nodeApi(rec.nodeID, fence)).setEgress(sandboxID, req)));
  }

  async nodeFor(sandboxID: string): Promise<NodeApi> {
    return this.nodes.nodeApi((await this.getSandbox(sandboxID)).nodeID);
  }

  /**
   * Writes the node's answer over the record (keeping its secrets) and returns it. The answer is
   * the newest the node said; a heartbeat reconcile that wrote since `rec` was read is retried
   * over, a delete is not undone.
   */
  private async record(rec: SandboxRecord, view: SandboxView): Promise<SandboxRecord> {
    const out: SandboxRecord = { ...view, ...secretsOf(rec), ...this.nodes.nodeStamp(view) };
    return (await this.writeOver(out, rec.generation ?? 0)) ?? out;
  }

  /**
   * The mark of a create not yet answered leaves the record right after its answer's write, in
   * the same turn of the event loop: a replica killed between the two leaves microseconds in which
   * a client holds a sandbox the reconcile will undo. Marking it in the store before the answer's
   * write, or after the 'finish' event, each left one of 12 in the cluster test's kill -9 (an
   * unheld sandbox kept, a held one undone: test/cluster/outcomes.test.ts). A connection closed
   * before the answer undoes the create now. Without a hook (callers inside the daemon) the create
   * counts as answered on return.
   */
  private async answered(rec: SandboxRecord, node: NodeApi, hook: AnswerHook | undefined): Promise<void> {
    const { store, log } = this.ctx;
    const mark = () =>
      store
        .markAnswered(rec.sandboxID)
        .catch((err: unknown) => log.error({ err, sandboxID: rec.sandboxID }, 'could not mark a create answered: the reconcile undoes it past its deadline'));
    if (!hook) return mark();
    hook.whenSent(
      () => void mark(),
      () =>
        void undoCreate(
          this.outcomes,
          rec,
          node,
          'the client closed its connection before the answer reached it, and the create carried no idempotency key to adopt it by',
        ).catch((err: unknown) => log.warn({ err, sandboxID: rec.sandboxID }, 'could not undo a create whose answer was not delivered')),
    );
  }

  /**
   * Writes `out` over the live record, starting from the generation the caller read; when a
   * heartbeat reconcile wrote in between, over that one (a node answer is newer than any list
   * taken before it). Undefined when the record was deleted meanwhile: a delete is not undone.
   * The generation to retry over is read where the compare-and-set happens, in MySQL: a route
   * in Redis can lag it (rebuilt from a snapshot after a reconnect), and retrying over the route's
   * generation failed every try (a create answered 130490 in the 200-create fault test).
   */
  private async writeOver(out: SandboxRecord, generation: number): Promise<SandboxRecord | undefined> {
    for (let g = generation, tries = 0; tries < 5; tries++) {
      const written = await this.ctx.store.putSandboxIf(out, g);
      if (written > 0) return { ...out, generation: written };
      const cur = await this.ctx.store.getSandboxForWrite(out.sandboxID);
      if (!cur || cur.state === 'gone') return undefined;
      g = cur.generation ?? 0;
    }
    throw new CubeError('SANDBOX_BUSY', `sandbox ${out.sandboxID}: its record kept changing while this operation wrote it`, { retryAfter: 1 });
  }
}

/** A create's node did not answer (internal: createSandbox tries another). */
class UnreachableNode extends Error {
  constructor(
    readonly nodeID: string,
    override readonly cause: CubeError,
  ) {
    super(cause.message);
  }
}
