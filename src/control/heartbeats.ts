// The nodes' heartbeats (served on the control's listener, see api/cluster-rpc.ts): a node
// registers on its first one, its view and liveness go to the live store, its notices to the
// event history, and its sandbox list reconciles the records (the node is their one writer of
// states).
import { heartbeatSeen, type Heartbeat, type HeartbeatAnswer } from '../cubelet/rpc-wire.js';
import type { SandboxRecord, SandboxView } from '../model/sandbox.js';
import { newToken } from '../ids.js';
import { syncNodeSandboxes } from './cluster/sandbox-sync.js';
import type { ControlContext } from './context.js';
import type { SandboxLocks } from './locks.js';
import type { Nodes } from './nodes.js';
import type { WatchStream } from './watch.js';
import type { Deaths } from './deaths.js';
import { CREATING_GRACE_MS, CREATOR_GONE, notOnNode, undoCreate, type OutcomeDeps } from './create-outcomes.js';

/** Node metrics outlive the heartbeat timeout so a lost node still shows its last numbers. */
const METRICS_TTL_MS = 10 * 60_000;

export class Heartbeats {
  private readonly syncing = new Set<string>();
  /** The latest list that came while the node's previous one was being reconciled (queueSync). */
  private readonly syncNext = new Map<string, Heartbeat>();
  /**
   * Each node's template list as this replica last wrote it to the registry: written again only
   * when the node reports a different one (or the write failed). Reading the previous reports
   * back from Redis instead cost a parse of every node's metrics per heartbeat batch.
   */
  private readonly templatesWritten = new Map<string, string>();

  constructor(
    private readonly ctx: ControlContext,
    private readonly nodes: Nodes,
    private readonly locks: SandboxLocks,
    private readonly watch: WatchStream,
    private readonly deaths: Deaths,
    private readonly outcomes: OutcomeDeps,
  ) {}

  /**
   * Heartbeats of several nodes at once (a process standing for many simulated nodes sends one
   * batch per interval): the registry, metrics, lost markers and records are each read once per
   * batch, not once per node. With `settle` (a node that has just started, before this
   * replica serves: nothing is mid-create on it) the records are reconciled before the answer,
   * `creating` ones included.
   */
  async heartbeats(hbs: Heartbeat[], settle = false): Promise<HeartbeatAnswer> {
    const { store } = this.ctx;
    const ids = hbs.map((hb) => hb.nodeID);
    // Liveness first, and in Redis alone: a MySQL outage must not make a healthy node look
    // silent. What follows (registry, templates, events, records) may fail with MySQL; the node
    // then sends its notices again with the next heartbeat. Views are written only when they
    // changed; the others are touched (their lastSeen moves), and a node whose view the store
    // does not hold is asked for it.
    const lost = await store.lostNodes(ids);
    await store.putNodeMetrics(
      hbs.flatMap((hb) => (hb.view ? [hb.view] : [])),
      METRICS_TTL_MS,
    );
    const resend = new Set(
      await store.touchNodeMetrics(
        hbs.flatMap((hb) => (hb.view || !hb.seen ? [] : [{ nodeID: hb.nodeID, lastSeen: hb.seen.lastSeen }])),
        METRICS_TTL_MS,
      ),
    );
    const listed = hbs.filter((hb) => hb.sandboxes !== undefined);
    const [recs, records] = await Promise.all([
      store.listNodes(),
      listed.length === 0 ? [] : store.listSandboxes(listed.length === 1 ? { nodeID: listed[0]!.nodeID } : undefined),
    ]);
    const byID = new Map(recs.map((r) => [r.nodeID, r]));
    await Promise.all(
      hbs.map(async (hb) => {
        const { nodeID, view } = hb;
        let rec = byID.get(nodeID);
        if (!rec || rec.address !== hb.address) {
          const fresh = !rec;
          // Registered with its view (a node deleted from the registry and back: its view went too).
          if (fresh && !view) return void resend.add(nodeID);
          // A node deleted from the registry (its templates with it) and back: written anew.
          if (fresh) this.templatesWritten.delete(nodeID);
          rec = { cordoned: false, draining: false, joinedAt: Date.now(), ...rec, nodeID, address: hb.address };
          await store.putNode(rec);
          if (fresh && view)
            await this.watch.appendEvent({
              kind: 'node.joined',
              nodeID,
              message: `node ${nodeID} registered at ${hb.address} (${view.capacity.cpus} cpus, ${view.capacity.memoryMiB} MiB, templates ${view.templates.join(', ') || 'none'})`,
            });
        }
        // The template registry changes only when the node's list does (it is in the view).
        if (view) await this.noteNodeTemplates(nodeID, view.templates);
        if (lost.has(nodeID)) {
          // Its sandboxes were marked lost: its list sets them right (asked for when it did not come).
          if (!hb.sandboxes) resend.add(nodeID);
          await store.clearNodeLost(nodeID);
          await this.watch.appendEvent({
            kind: 'node.joined',
            nodeID,
            message: `node ${nodeID} is back after being lost; its sandboxes are reconciled with what it still holds`,
          });
        }
      }),
    );
    // In order, and in one batch (the store groups appends that come together); each once per
    // sender and seq, however often the heartbeat was sent.
    // A sandbox.died notice keeps its tombstone first, while the record (reconciled below) still says what the sandbox was.
    await Promise.all(hbs.flatMap((hb) => hb.events.map((e) => this.deaths.noted(e).then(() => this.watch.appendNodeEvent(e, hb.sender)))));
    // The records are reconciled behind the answer: a node's liveness must not wait on record
    // writes queued behind a burst of creates. One reconcile per node at a time; a list arriving
    // meanwhile is reconciled after it (the latest only).
    const held = new Map<string, SandboxRecord[]>();
    for (const r of records) held.set(r.nodeID, [...(held.get(r.nodeID) ?? []), r]);
    for (const hb of listed) {
      if (settle) await this.syncSandboxes(hb.nodeID, held.get(hb.nodeID) ?? [], hb.sandboxes!, hb.at, 'settle');
      else this.queueSync(hb, held.get(hb.nodeID) ?? []);
    }
    // Nodes run the cluster's config: this replica's is the store's (followConfig, every tick).
    const { version, config } = this.ctx.cfg.versionInfo;
    const answer: HeartbeatAnswer = hbs.some((hb) => heartbeatSeen(hb)?.configVersion !== version)
      ? { ok: true, config: { version, master: config.master } }
      : { ok: true };
    return resend.size > 0 ? { ...answer, resend: [...resend] } : answer;
  }

  /**
   * Writes node `nodeID`'s template list in the registry when it differs from what this replica
   * wrote last: from its heartbeats, and at once after an import, build, tag or rm through this
   * replica (LayerRelay.templatesChanged: the client's next list shows its write).
   */
  async noteNodeTemplates(nodeID: string, templates: string[]): Promise<void> {
    const key = templates.join('\0');
    if (this.templatesWritten.get(nodeID) === key) return;
    this.templatesWritten.delete(nodeID);
    await this.ctx.store.setNodeTemplates(nodeID, templates);
    this.templatesWritten.set(nodeID, key);
  }

  /**
   * Reconciles a node's list behind the heartbeat's answer, one at a time per node. A list that
   * comes while one is reconciled waits for it (only the latest), then is reconciled over records
   * read afresh: with lists sent only when they change, a skipped one would wait for the next
   * refresh (SANDBOX_LIST_REFRESH_MS).
   */
  private queueSync(hb: Heartbeat, records: SandboxRecord[]): void {
    if (this.syncing.has(hb.nodeID)) return void this.syncNext.set(hb.nodeID, hb);
    this.syncing.add(hb.nodeID);
    void (async () => {
      await this.syncSandboxes(hb.nodeID, records, hb.sandboxes!, hb.at, CREATING_GRACE_MS);
      for (let next = this.syncNext.get(hb.nodeID); next; next = this.syncNext.get(hb.nodeID)) {
        this.syncNext.delete(hb.nodeID);
        await this.syncSandboxes(hb.nodeID, await this.ctx.store.listSandboxes({ nodeID: hb.nodeID }), next.sandboxes!, next.at, CREATING_GRACE_MS);
      }
    })()
      .catch((err: unknown) => this.ctx.log.warn({ err, nodeID: hb.nodeID }, 'sandbox reconcile failed'))
      .finally(() => this.syncing.delete(hb.nodeID));
  }

  /**
   * `creatingGraceMs` 'settle': the node has just started, so no create is under way on it and
   * every `creating` record is settled now, however far its deadline (the first list after a
   * kill -9 mid-burst showed them `creating` until the sweep).
   */
  private async syncSandboxes(
    nodeID: string,
    records: SandboxRecord[],
    onNode: SandboxView[],
    listedAt: number | undefined,
    creatingGraceMs: number | 'settle',
  ): Promise<void> {
    const { store } = this.ctx;
    const read = new Map(records.map((r) => [r.sandboxID, r]));
    const settle = creatingGraceMs === 'settle';
    for (const a of syncNodeSandboxes(records, onNode, settle ? Infinity : Date.now(), settle ? 0 : creatingGraceMs, listedAt)) {
      const sandboxID = a.type === 'unknown' ? a.view.sandboxID : a.rec.sandboxID;
      const was = read.get(sandboxID);
      // An operation in progress writes its own outcome; this heartbeat may predate it. Writes
      // are compare-and-set on the generation read with `records`: a record written since (an
      // operation that finished, a delete) is newer than this report and stays.
      await this.locks
        .withLock(sandboxID, async (fence) => {
          // A create holds its lock until its answer is written (create-outcomes.ts): a `creating`
          // record whose lock this took lost its creator, and without a key nobody will ever learn
          // of the sandbox; one its node does not hold past its deadline did not happen.
          if (a.type === 'update' && was?.state === 'creating' && was.createBy !== undefined && !was.keyed)
            await undoCreate(this.outcomes, was, await this.nodes.nodeApi(nodeID, fence), CREATOR_GONE);
          // Read again under the lock: the answer may have been delivered since `records` (its mark cleared, the generation kept).
          else if (a.type === 'unanswered') {
            const cur = await store.getSandbox(sandboxID);
            if (cur?.createBy !== undefined && cur.generation === a.rec.generation)
              await undoCreate(this.outcomes, cur, await this.nodes.nodeApi(nodeID, fence), CREATOR_GONE);
          } else if (a.type === 'update') await store.putSandboxIf(a.rec, a.rec.generation ?? 0);
          else if (a.type === 'gone' && a.rec.state === 'creating' && a.rec.createBy !== undefined)
            await undoCreate(this.outcomes, a.rec, undefined, notOnNode(nodeID));
          else if (a.type === 'gone') {
            // Gone without a sandbox.died notice before it (that tombstone stays): lost with its node, or unexplained.
            if ((await store.deleteSandboxIf(sandboxID, a.rec.generation ?? 0)) && a.rec.state !== 'creating') {
              await this.deaths.bury(
                {
                  sandboxID,
                  nodeID,
                  at: Date.now(),
                  ...(a.rec.state === 'lost'
                    ? { reason: 'node_lost', message: `node ${nodeID} came back without it` }
                    : { reason: 'vanished', message: `node ${nodeID} no longer lists it and gave no reason` }),
                },
                a.rec,
              );
            }
          } else if (await store.wasDeleted(sandboxID)) await this.nodes.nodeApi(nodeID, fence).then((n) => n.destroySandbox(sandboxID));
          // Created on the node but its record was never written (a replica died in between): adopt
          // it, unless a record appeared meanwhile (a create that was still writing it).
          else if ((await store.putSandboxIf({ ...a.view, accessToken: newToken(), envVars: {} }, 0)) > 0) {
            await this.watch.appendEvent({
              kind: 'sandbox.created',
              nodeID,
              sandboxID,
              message: `adopted from node ${nodeID} (its record was missing; new access token)`,
            });
          }
        })
        .catch((err: unknown) => this.ctx.log.warn({ err, sandboxID, action: a.type }, 'sandbox reconcile step failed'));
    }
  }
}
