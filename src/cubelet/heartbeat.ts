// The compute node's side of cluster membership: every interval it posts to a control replica
// that it is alive, its view and its sandbox list when they changed (the list at least every
// SANDBOX_LIST_REFRESH_MS), and the notices emitted since the last accepted heartbeat. Any
// replica will do: on failure the next one in the list is tried, so a dead replica costs one
// interval, not the node's membership. A process that stands for many nodes (the sim runtime)
// sends all of their heartbeats in one request per interval. The answer carries the cluster's
// config when the node runs another version: the node puts its master section in force, over
// its own cubemaster.yaml (its cubelet.toml stays its own: rpc-wire.ts HeartbeatAnswer).
import { randomBytes } from 'node:crypto';
import type { Logger } from 'pino';
import type { ConfigStore } from '../config/store.js';
import type { EventView } from '../model/event.js';
import type { NodeView } from '../model/node.js';
import { seenAt } from './node-view.js';
import { HEARTBEAT_PATH, SANDBOX_LIST_REFRESH_MS, type Heartbeat, type HeartbeatAnswer, type HeartbeatBatch, type NodeNotice } from './rpc-wire.js';
import type { NodeApi } from './types.js';

export interface HeartbeatMember {
  node: NodeApi;
  /** Where this node's RPC listens, as the control replicas reach it. */
  address: string;
}

/**
 * Where heartbeats go: the control replicas over HTTP, or the control plane in this process
 * (role all), which hears the node's notices itself as they happen (they are not carried).
 */
export type HeartbeatTarget = { controls: string[]; secret: string } | { local: (batch: HeartbeatBatch) => Promise<HeartbeatAnswer> };

export interface HeartbeatOptions {
  nodes: HeartbeatMember[];
  /** `controls`: base URLs of the control replicas, e.g. http://10.0.0.1:3000, tried in turn. */
  to: HeartbeatTarget;
  log: Logger;
  intervalMs?: number;
  /** This process's config: the cluster's version is put in force in it. */
  config?: ConfigStore;
}

/** Notices kept while no replica answers; older ones are dropped first (and counted). */
const MAX_PENDING_EVENTS = 1000;

/** What the last accepted heartbeat carried for a node (JSON, the view's lastSeen left out), and when its list is due again. */
interface Sent {
  view?: string;
  list?: string;
  listDue: number;
  /**
   * The node's stateVersion and the config version its view carried when they were taken: while
   * neither moved, a heartbeat builds no view and takes no list (the list only when it is due).
   */
  version?: number;
  following?: number;
}

type Carried = { nodeID: string; view?: string; list?: string; version: number | undefined; following: number | undefined };

const unstamped = ({ lastSeen: _, ...rest }: NodeView): Omit<NodeView, 'lastSeen'> => rest;

export class HeartbeatSender {
  private readonly pending: NodeNotice[] = [];
  /** Numbers the notices: the control appends each (sender, seq) once, so a heartbeat sent again after a lost answer adds nothing twice. */
  private readonly sender: string;
  private seq = 0;
  private readonly sent = new Map<string, Sent>();
  private dropped = 0;
  private current = 0;
  private timer?: NodeJS.Timeout;
  private unsubscribes: (() => void)[] = [];
  private running?: Promise<boolean>;
  private failing = false;
  /** The version of the cluster's config in force here; undefined until one came, or after the node's own files changed it. */
  private following?: number;
  private adopting = false;

  constructor(private readonly o: HeartbeatOptions) {
    if ('controls' in o.to && o.to.controls.length === 0) throw new Error('heartbeat needs at least one control URL');
    if (o.nodes.length === 0) throw new Error('heartbeat needs at least one node');
    this.sender = `${o.nodes[0]!.node.nodeID}:${randomBytes(6).toString('hex')}`;
  }

  start(): void {
    const max = MAX_PENDING_EVENTS * this.o.nodes.length;
    this.unsubscribes = ('local' in this.o.to ? [] : this.o.nodes).map(({ node }) =>
      node.subscribe((e) => {
        if (e.type !== 'event') return;
        this.pending.push({ ...e.event, seq: ++this.seq });
        if (this.pending.length > max) {
          this.pending.shift();
          this.dropped++;
        }
      }),
    );
    const cfg = this.o.config;
    // The node's own files changed it (a reload): the cluster's version is asked for again.
    if (cfg)
      this.unsubscribes.push(
        cfg.on('change', () => {
          if (!this.adopting) this.following = undefined;
        }),
      );
    this.timer = setInterval(() => {
      this.running ??= this.beat().finally(() => (this.running = undefined));
    }, this.o.intervalMs ?? 1000);
    this.running = this.beat().finally(() => (this.running = undefined));
  }

  async stop(): Promise<void> {
    clearInterval(this.timer);
    for (const u of this.unsubscribes.splice(0)) u();
    await this.running;
  }

  /** One heartbeat; true when a replica accepted it. */
  async beat(): Promise<boolean> {
    const first = this.o.nodes[0]!.node.nodeID;
    if (this.dropped > 0) {
      this.pending.push({
        at: Date.now(),
        kind: 'sandbox.error',
        nodeID: first,
        message: `${this.dropped} node notice(s) dropped while no control replica answered`,
        seq: ++this.seq,
      });
      this.dropped = 0;
    }
    const events = this.pending.slice();
    const sent = events.length;
    let batch: HeartbeatBatch;
    let carried: Carried[];
    const now = Date.now();
    try {
      const byNode = new Map<string, NodeNotice[]>();
      for (const e of events) {
        const id = e.nodeID ?? first;
        byNode.set(id, [...(byNode.get(id) ?? []), e]);
      }
      const beats = await Promise.all(
        this.o.nodes.map(async ({ node, address }) => {
          const at = Date.now();
          // Read before the view and the list: a change while they are taken moves it again.
          const version = node.stateVersion?.();
          const last = this.sent.get(node.nodeID);
          const still = version !== undefined && last?.version === version && last.following === this.following;
          const [nodeView, sandboxes] = await Promise.all([
            still && last.view ? undefined : node.nodeView(),
            still && last.list && now < last.listDue ? undefined : node.listSandboxes(),
          ]);
          const hb: Heartbeat = { nodeID: node.nodeID, address, events: byNode.get(node.nodeID) ?? [], at };
          if (hb.events.length > 0) hb.sender = this.sender;
          const view = nodeView && (this.following === undefined ? nodeView : { ...nodeView, configVersion: this.following });
          const viewKey = view && JSON.stringify(unstamped(view));
          const listKey = sandboxes && JSON.stringify(sandboxes);
          if (view && viewKey !== last?.view) hb.view = view;
          else
            hb.seen = {
              ...(view ? { lastSeen: view.lastSeen } : seenAt(new Date(at))),
              ...(this.following !== undefined ? { configVersion: this.following } : {}),
            };
          if (sandboxes && (!last || listKey !== last.list || now >= last.listDue)) hb.sandboxes = sandboxes;
          return {
            hb,
            carried: {
              nodeID: node.nodeID,
              version,
              following: this.following,
              ...(hb.view ? { view: viewKey } : {}),
              ...(hb.sandboxes ? { list: listKey } : {}),
            },
          };
        }),
      );
      batch = { heartbeats: beats.map((b) => b.hb) };
      carried = beats.map((b) => b.carried);
    } catch (err) {
      this.o.log.error({ err }, 'could not assemble the heartbeat');
      return false;
    }
    const to = this.o.to;
    const targets = 'local' in to ? [{ url: 'in-process', send: () => to.local(batch) }] : this.remoteTargets(to, JSON.stringify(batch));
    for (let i = 0; i < targets.length; i++) {
      const { url, send } = targets[(this.current + i) % targets.length]!;
      try {
        const answer = await send();
        if (answer.config) await this.follow(answer.config);
        this.current = (this.current + i) % targets.length;
        this.pending.splice(0, sent);
        this.accepted(carried, now, answer.resend);
        if (this.failing) this.o.log.info({ control: url }, 'heartbeat accepted again');
        this.failing = false;
        return true;
      } catch (err) {
        if (!this.failing) this.o.log.warn({ control: url, err: (err as Error).message }, 'heartbeat refused or unreachable; trying the next control replica');
      }
    }
    // Nothing is known to be held any more (a node silent long enough is marked lost, its view
    // may have expired): everything goes in full once a replica answers again.
    this.failing = true;
    this.sent.clear();
    return false;
  }

  /** Remembers what the control now holds; the nodes it asks again for send their view and list in full next time. */
  private accepted(carried: Carried[], now: number, resend: string[] = []): void {
    for (const c of carried) {
      const s = this.sent.get(c.nodeID) ?? { listDue: 0 };
      // What the view and the list were compared with (or carried) is what the control holds as of this version.
      [s.version, s.following] = [c.version, c.following];
      if (c.view !== undefined) s.view = c.view;
      // Spread, so that a process standing for many nodes does not send every list on one beat.
      if (c.list !== undefined) [s.list, s.listDue] = [c.list, now + SANDBOX_LIST_REFRESH_MS * (0.5 + Math.random())];
      this.sent.set(c.nodeID, s);
    }
    for (const id of resend) this.sent.delete(id);
  }

  private remoteTargets(to: { controls: string[]; secret: string }, body: string): { url: string; send: () => Promise<HeartbeatAnswer> }[] {
    return to.controls.map((url) => ({
      url,
      send: async () => {
        const res = await fetch(new URL(HEARTBEAT_PATH, url), {
          method: 'POST',
          headers: { authorization: `Bearer ${to.secret}`, 'content-type': 'application/json' },
          body,
          signal: AbortSignal.timeout(Math.max(2000, (this.o.intervalMs ?? 1000) * 2)),
        });
        if (!res.ok) throw new Error(`${res.status} ${await res.text()}`);
        return (await res.json()) as HeartbeatAnswer;
      },
    }));
  }

  /** Puts the cluster's config in force here. A replica that lags behind another may answer an older version: not taken. */
  private async follow(c: NonNullable<HeartbeatAnswer['config']>): Promise<void> {
    const cfg = this.o.config;
    if (!cfg || (this.following !== undefined && c.version <= this.following)) return;
    this.adopting = true;
    try {
      // The node's own cubelet section as it is when the adopt's turn comes: read before, an
      // edit of cubelet.toml queued ahead of it was undone.
      const r = await cfg.adopt(async (cur) => ({ version: c.version, config: { master: c.master, cubelet: cur.config.cubelet } }));
      if (r.changes.length > 0) this.o.log.info({ version: c.version, changes: r.changes.map((x) => x.path) }, "the cluster's config is in force");
    } finally {
      this.adopting = false;
    }
    this.following = c.version;
  }
}
