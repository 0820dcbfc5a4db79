// ControlPlane for role all: one local Cubelet, the embedded store and the ConfigStore.
// Records follow the cubelet's events (one writer per fact: the node says what state a
// sandbox is in, the store remembers it); admission goes through the same pipeline as a cluster.
import type { Logger } from 'pino';
import type { ConfigView, EventKind, EventView, NodeView, PauseOptions, ReloadResult, SandboxView, Snapshot, WatchMessage } from '../api/types.js';
import type { ConfigStore } from '../config/store.js';
import type { Cubelet } from '../cubelet/cubelet.js';
import { withOperatorFlags } from '../cubelet/node-view.js';
import type { NodeApi, NodeEvent } from '../cubelet/types.js';
import { CubeError, toCubeError } from '../errors.js';
import { newSandboxID, newToken } from '../ids.js';
import type { NodeRecord, StateStore } from '../store/types.js';
import type { ControlPlane, CreateSandboxRequest, ListFilter, NodeAction, SandboxRecord } from './control-plane.js';
import { audit, audited, checkTimeout, refusalError, refusalOf, refusalRule, requireFits, requireTemplate, resolveCreate, resumeRefusal } from './admission.js';
import { CreateStats } from './create-stats.js';
import { schedule } from './pipeline.js';
import { withSchedulability } from './schedulable.js';
import { snapshotOf, Watchers } from './watchers.js';
import { createFromSnapshot, SnapshotBook } from './snapshots.js';
import type { EgressRequest } from '../network/egress.js';

export interface LocalControlPlaneOptions {
  cubelet: Cubelet;
  store: StateStore;
  config: ConfigStore;
  log: Logger;
  /** Node view deltas on the watch stream at most this often. */
  nodeIntervalMs?: number;
}

type Secrets = Pick<SandboxRecord, 'accessToken' | 'envVars'>;

export class LocalControlPlane implements ControlPlane {
  private readonly cubelet: Cubelet;
  private readonly store: StateStore;
  private readonly cfg: ConfigStore;
  private readonly log: Logger;
  private readonly secrets = new Map<string, Secrets>();
  private readonly watchers = new Watchers();
  private readonly stats = new CreateStats();
  readonly snapshots: SnapshotBook;
  private readonly unsubs: (() => void)[] = [];
  private flags: NodeRecord;
  private inFlight = 0;
  private nodeTimer?: NodeJS.Timeout;
  private lastNodeJson = '';
  private lastStatsJson = '';
  // Store writes happen in event order; a failure is logged, never lost silently.
  private writes: Promise<unknown> = Promise.resolve();

  constructor(private readonly o: LocalControlPlaneOptions) {
    this.cubelet = o.cubelet;
    this.store = o.store;
    this.cfg = o.config;
    this.log = o.log;
    this.flags = { nodeID: o.cubelet.nodeID, cordoned: false, draining: false, joinedAt: new Date().toISOString() };
    this.snapshots = new SnapshotBook({ store: o.store, node: async () => this.cubelet, sandbox: (id) => this.getSandbox(id), create: (req) => this.createSandbox(req), log: o.log });
  }

  /** After cubelet.start(): aligns records with the sandboxes the node re-adopted and starts the deltas. */
  async start(): Promise<void> {
    const nodeID = this.cubelet.nodeID;
    const known = await this.store.getNode(nodeID);
    if (known) this.flags = known;
    else {
      await this.store.putNode(this.flags);
      await this.appendEvent({ kind: 'node.joined', nodeID, message: `node ${nodeID} registered` });
    }
    const live = new Map((await this.cubelet.listSandboxes()).map((s) => [s.sandboxID, s]));
    for (const rec of await this.store.listSandboxes()) {
      const now = live.get(rec.sandboxID);
      if (now) {
        this.secrets.set(rec.sandboxID, { accessToken: rec.accessToken, envVars: rec.envVars });
        await this.store.putSandbox({ ...rec, ...now });
        live.delete(rec.sandboxID);
      } else {
        await this.store.deleteSandbox(rec.sandboxID);
        await this.appendEvent({ kind: 'sandbox.destroyed', nodeID, sandboxID: rec.sandboxID, message: `not found on the node at start (was ${rec.state}); record removed` });
      }
    }
    // Complete on the node but unknown to the store (its write was lost): adopt with a new token.
    for (const s of live.values()) await this.putRecord(s, { accessToken: newToken(), envVars: {} });
    const swept = await this.snapshots.sweep(this.cubelet);
    if (swept.data.length || swept.records.length) this.log.info({ unrecorded: swept.data, dataGone: swept.records }, 'snapshots swept at start');
    this.cfg.resumeNumbering((await this.store.latestConfigVersion())?.version ?? 0);
    const v = this.cfg.versionInfo;
    await this.store.putConfigVersion({ version: v.version, at: v.loadedAt, actor: 'system', reason: 'start', master: v.config.master, cubelet: v.config.cubelet });

    this.unsubs.push(this.cubelet.subscribe((e) => this.onNodeEvent(e)));
    this.unsubs.push(
      this.cfg.on('change', ({ current, changes }) => {
        this.queue(() => this.store.putConfigVersion({ version: current.version, at: current.loadedAt, actor: 'system', reason: changes.map((c) => c.path).join(', '), master: current.config.master, cubelet: current.config.cubelet }));
        this.broadcast({ type: 'config', config: this.cfg.view(), changes });
        this.queue(() => this.appendEvent({ kind: 'config.reloaded', message: `config version ${current.version}: ${changes.map((c) => `${c.path} ${JSON.stringify(c.from)} -> ${JSON.stringify(c.to)}`).join(', ')}` }));
      }),
      // A rejection, or files fixed back to what is in force, change no version but the view's `rejected`.
      this.cfg.on('reload', (r) => {
        if (!r.ok || r.changes.length === 0) this.broadcast({ type: 'config', config: this.cfg.view(), changes: [] });
      }),
      this.cfg.on('rejected', ({ errors, kept }) => {
        this.queue(() => this.appendEvent({ kind: 'config.rejected', code: 130483, message: `config rejected, version ${kept.version} stays: ${errors.map((e) => `${e.path}: ${e.message}`).join('; ')}` }));
      }),
    );
    this.nodeTimer = setInterval(() => void this.tick(), this.o.nodeIntervalMs ?? 1000);
    this.nodeTimer.unref();
  }

  async stop(): Promise<void> {
    clearInterval(this.nodeTimer);
    for (const u of this.unsubs.splice(0)) u();
    await this.writes;
  }

  async createSandbox(asked: CreateSandboxRequest): Promise<SandboxRecord> {
    const snap = await this.snapshots.forCreate(asked.templateID);
    const req = snap ? createFromSnapshot(snap, asked) : asked;
    const master = this.cfg.config.master;
    const { templateID, cpus, memoryMiB, diskGiB, timeoutSec } = resolveCreate(req, master);
    const node = await this.nodeView();
    requireTemplate(templateID, [node]);
    requireFits({ cpus, memoryMiB }, [node], master);
    const placed = schedule({ templateID, cpus, memoryMiB, ...(req.nodeID !== undefined ? { nodeID: req.nodeID } : {}), ...(req.runtime !== undefined ? { runtime: req.runtime } : {}) }, [{ view: node, inFlightCreates: this.inFlight }], master, Date.now());
    const refusal = refusalOf(placed, [node]);
    if (refusal !== undefined) {
      const err = refusalError(placed, refusal);
      this.stats.recordRefusal(err.code, refusalRule(placed));
      await this.appendEvent({ kind: 'schedule.failed', nodeID: node.nodeID, code: 130597, message: refusal });
      await this.audit(req.actor, 'sandbox.create', templateID, refusal);
      throw err;
    }
    const sandboxID = newSandboxID();
    const secrets: Secrets = { accessToken: newToken(), envVars: { ...(req.envVars ?? {}) } };
    this.secrets.set(sandboxID, secrets);
    const t0 = performance.now();
    this.inFlight++;
    try {
      const view = await this.cubelet.createSandbox({
        sandboxID,
        templateID,
        cpus,
        memoryMiB,
        diskGiB,
        endAt: new Date(Date.now() + timeoutSec * 1000).toISOString(),
        env: secrets.envVars,
        metadata: { ...(req.metadata ?? {}) },
        ...(req.egress ? { egress: req.egress } : {}),
        ...(req.lifecycle ? { lifecycle: req.lifecycle } : {}),
        ...(req.actor !== undefined ? { owner: req.actor } : {}),
        ...(req.runtime !== undefined ? { runtime: req.runtime } : {}),
        ...(req.fromSnapshot !== undefined ? { fromSnapshot: req.fromSnapshot } : {}),
      });
      this.stats.record(performance.now() - t0);
      await this.audit(req.actor, 'sandbox.create', sandboxID, 'ok', { templateID, cpus, memoryMiB });
      return { ...view, ...secrets };
    } catch (e) {
      this.secrets.delete(sandboxID);
      await this.audit(req.actor, 'sandbox.create', sandboxID, toCubeError(e).message);
      throw e;
    } finally {
      this.inFlight--;
    }
  }

  async getSandbox(sandboxID: string): Promise<SandboxRecord> {
    await this.writes;
    const rec = await this.store.getSandbox(sandboxID);
    if (!rec || rec.state === 'gone') throw new CubeError('NOT_FOUND', `sandbox ${sandboxID} not found`);
    return rec;
  }

  async listSandboxes(filter?: ListFilter): Promise<SandboxRecord[]> {
    await this.writes;
    return this.store.listSandboxes(filter);
  }

  async destroySandbox(sandboxID: string, actor?: string): Promise<void> {
    await this.getSandbox(sandboxID);
    await this.audited(actor, 'sandbox.destroy', sandboxID, () => this.cubelet.destroySandbox(sandboxID));
  }

  async pauseSandbox(sandboxID: string, actor?: string, opts?: PauseOptions): Promise<SandboxRecord> {
    await this.getSandbox(sandboxID);
    return this.withSecrets(await this.audited(actor, 'sandbox.pause', sandboxID, () => this.cubelet.pauseSandbox(sandboxID, opts)));
  }

  async resumeSandbox(sandboxID: string, timeoutSec?: number, actor?: string): Promise<{ sandbox: SandboxRecord; resumed: boolean }> {
    if (timeoutSec !== undefined) checkTimeout(timeoutSec, this.cfg.config.master);
    const rec = await this.getSandbox(sandboxID);
    let resumed = false;
    if (rec.state === 'paused') {
      await this.admitResume(rec);
      await this.audited(actor, 'sandbox.resume', sandboxID, () => this.cubelet.resumeSandbox(sandboxID));
      resumed = true;
    }
    const view = timeoutSec !== undefined ? await this.cubelet.setEndAt(sandboxID, new Date(Date.now() + timeoutSec * 1000).toISOString()) : await this.cubelet.getSandbox(sandboxID);
    if (!view) throw new CubeError('NOT_FOUND', `sandbox ${sandboxID} not found`);
    return { sandbox: this.withSecrets(view), resumed };
  }

  private async admitResume(rec: SandboxRecord): Promise<void> {
    const refusal = resumeRefusal(rec.spec, await this.cubelet.nodeView(), this.cfg.config.master);
    if (refusal === undefined) return;
    this.stats.recordRefusal(130409, 'release_ratio');
    throw new CubeError('CONFLICT', refusal);
  }

  async setTimeout(sandboxID: string, timeoutSec: number): Promise<SandboxRecord> {
    checkTimeout(timeoutSec, this.cfg.config.master, 1);
    await this.getSandbox(sandboxID);
    return this.withSecrets(await this.cubelet.setEndAt(sandboxID, new Date(Date.now() + timeoutSec * 1000).toISOString()));
  }

  async setEgress(sandboxID: string, req: EgressRequest): Promise<SandboxRecord> {
    await this.getSandbox(sandboxID);
    return this.withSecrets(await this.cubelet.setEgress(sandboxID, req));
  }

  async nodeFor(sandboxID: string): Promise<NodeApi> {
    if (!(await this.cubelet.getSandbox(sandboxID))) throw new CubeError('NOT_FOUND', `sandbox ${sandboxID} not found`);
    return this.cubelet;
  }

  async listNodes(): Promise<NodeView[]> {
    return [await this.nodeView()];
  }

  async nodeAction(a: NodeAction): Promise<NodeView> {
    if (a.nodeID !== this.cubelet.nodeID) throw new CubeError('NOT_FOUND', `node ${a.nodeID} not found (this daemon runs node ${this.cubelet.nodeID})`);
    return this.audited(a.actor, `node.${a.action}`, a.nodeID, async () => {
      const nodeID = a.nodeID;
      switch (a.action) {
        case 'cordon':
          await this.setFlags({ cordoned: true });
          await this.appendEvent({ kind: 'node.cordoned', nodeID, message: `node ${nodeID} cordoned` });
          break;
        case 'uncordon':
          await this.setFlags({ cordoned: false, draining: false });
          await this.appendEvent({ kind: 'node.uncordoned', nodeID, message: `node ${nodeID} uncordoned` });
          break;
        case 'drain': {
          await this.setFlags({ draining: true });
          const evict = a.evict === true;
          const deadlineSec = a.deadlineSec ?? 0;
          await this.appendEvent({ kind: 'node.draining', nodeID, message: evict ? `node ${nodeID} draining: sandboxes destroyed after ${deadlineSec}s` : `node ${nodeID} draining: waiting for sandboxes to end` });
          if (evict) {
            const t = setTimeout(() => void this.evictAll(), deadlineSec * 1000);
            t.unref();
          }
          break;
        }
        case 'delete': {
          const view = await this.nodeView();
          if (!view.cordoned) throw new CubeError('CONFLICT', `node ${nodeID} must be cordoned before it is deleted`);
          if (view.sandboxes.total > 0) throw new CubeError('CONFLICT', `node ${nodeID} still holds ${view.sandboxes.total} sandbox(es)`);
          throw new CubeError('CONFLICT', `node ${nodeID} is this daemon's own node (role all) and cannot be deleted; stop the daemon instead`);
        }
      }
      const view = await this.nodeView();
      this.broadcast({ type: 'node', node: view });
      return view;
    });
  }

  private async evictAll(): Promise<void> {
    for (const s of await this.cubelet.listSandboxes()) {
      await this.cubelet.destroySandbox(s.sandboxID).catch((err: unknown) => this.log.error({ err, sandboxID: s.sandboxID }, 'drain eviction failed'));
    }
  }

  private async setFlags(f: Partial<Pick<NodeRecord, 'cordoned' | 'draining'>>): Promise<void> {
    this.flags = { ...this.flags, ...f };
    await this.store.putNode(this.flags);
  }

  config(): ConfigView {
    return this.cfg.view();
  }

  async reloadConfig(actor?: string): Promise<ReloadResult> {
    const r = await this.cfg.reload();
    await this.audit(actor, 'config.reload', this.cfg.dir, r.ok ? 'ok' : (r.error ?? []).map((e) => `${e.path}: ${e.message}`).join('; '), { version: r.version });
    return r;
  }

  async setConfig(path: string, value: unknown, actor?: string): Promise<ReloadResult> {
    return this.audited(actor, 'config.set', path, () => this.cfg.set(path, value), { value });
  }

  async templates(): Promise<{ templateID: string; nodes: string[] }[]> {
    const node = await this.cubelet.nodeView();
    return node.templates.map((templateID) => ({ templateID, nodes: [node.nodeID] }));
  }

  async events(opts?: { sinceID?: number; beforeID?: number; limit?: number }): Promise<EventView[]> {
    await this.writes;
    return this.store.listEvents(opts);
  }

  async snapshot(): Promise<Snapshot> {
    await this.writes;
    return snapshotOf(this.store, await this.listNodes(), this.cfg.view(), this.stats.view());
  }

  watch(listener: (m: WatchMessage) => void): () => void {
    return this.watchers.add(listener);
  }

  private async nodeView(): Promise<NodeView> {
    return withSchedulability(withOperatorFlags(await this.cubelet.nodeView(), this.flags), this.inFlight, this.cfg.config.master, Date.now());
  }

  private async tick(): Promise<void> {
    if (this.watchers.size === 0) return;
    try {
      const node = await this.nodeView();
      // lastSeen alone changing is not news; the heartbeat is at most a few seconds old anyway.
      const key = JSON.stringify({ ...node, lastSeen: '' });
      if (key !== this.lastNodeJson) {
        this.lastNodeJson = key;
        this.broadcast({ type: 'node', node });
      }
      const stats = this.stats.view();
      const sk = JSON.stringify(stats);
      if (sk !== this.lastStatsJson) {
        this.lastStatsJson = sk;
        this.broadcast({ type: 'stats', stats });
      }
    } catch (err) {
      this.log.warn({ err }, 'node view for the watch stream failed');
    }
  }

  private onNodeEvent(e: NodeEvent): void {
    switch (e.type) {
      case 'sandbox': {
        const s = this.secrets.get(e.sandbox.sandboxID);
        if (s) this.queue(() => this.putRecord(e.sandbox, s));
        this.broadcast({ type: 'sandbox', sandbox: e.sandbox });
        break;
      }
      case 'sandbox.removed':
        this.secrets.delete(e.sandboxID);
        this.queue(() => this.store.deleteSandbox(e.sandboxID));
        this.broadcast({ type: 'sandbox.removed', sandboxID: e.sandboxID });
        break;
      case 'event':
        this.queue(() => this.appendEvent(e.event));
        break;
    }
  }

  private async putRecord(view: SandboxView, s: Secrets): Promise<void> {
    this.secrets.set(view.sandboxID, s);
    await this.store.putSandbox({ ...view, ...s });
  }

  private async appendEvent(e: Omit<EventView, 'id' | 'at'> & { at?: string; kind: EventKind }): Promise<void> {
    const event = await this.store.appendEvent({ ...e, at: e.at ?? new Date().toISOString() });
    this.broadcast({ type: 'event', event });
  }

  private queue(fn: () => Promise<unknown>): void {
    this.writes = this.writes.then(fn).catch((err: unknown) => this.log.error({ err }, 'state store write failed'));
  }

  private broadcast(m: WatchMessage): void {
    this.watchers.broadcast(m);
  }

  private withSecrets(view: SandboxView): SandboxRecord {
    return { ...view, ...(this.secrets.get(view.sandboxID) ?? { accessToken: '', envVars: {} }) };
  }

  private audit(actor: string | undefined, action: string, target: string, outcome: string, detail?: Record<string, unknown>): Promise<void> {
    return audit(this.store, actor, action, target, outcome, detail);
  }

  private audited<T>(actor: string | undefined, action: string, target: string, fn: () => Promise<T>, detail?: Record<string, unknown>): Promise<T> {
    return audited(this.store, actor, action, target, fn, detail);
  }
}

/** A record without what only the sandbox's owner may see (token, env). */
export function publicView(rec: SandboxRecord): SandboxView {
  const { accessToken: _t, envVars: _e, generation: _g, nodeAt: _n, ...view } = rec;
  return view;
}
