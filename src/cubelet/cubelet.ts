// The node agent: sandboxes on this host through the runtime driver and the network-agent,
// with the state machine and timeouts. Every create either completes or
// leaves nothing behind. Its other rooms: restart re-adoption (readopt.ts), the sandbox table and
// the calls made inside a sandbox (sandbox-calls.ts), the liveness and OOM watch (liveness.ts), node figures (node-metrics.ts, node-view.ts),
// events to listeners (node-events.ts).
import type { Logger } from 'pino';
import type { Config } from '../config/schema.js';
import { CubeError, deathCode, isCubeError } from '../errors.js';
import type { DeathReason } from '../model/death.js';
import { watchLiveness } from './liveness.js';
import type { EventKind, EventView } from '../model/event.js';
import { limitAsk } from '../model/limits.js';
import type { NodeView } from '../model/node.js';
import type { EgressRequest, PauseOptions, SandboxSpecView, SandboxState, SandboxUsage, SandboxView, SnapshotKeeps } from '../model/sandbox.js';
import { isoTime, stamp } from '../model/time.js';
import type { NetworkAgent } from '../network/types.js';
import type { RuntimeDriver, TemplateRef } from '../runtime/types.js';
import { HOST, hostCpus, type HostReadings } from './host-metrics.js';
import { META_FILES, runtimeIdOf, type MetaKeeper, type SandboxMeta } from './meta.js';
import { describeEgress, resolveEgress } from '../network/egress.js';
import { slotModeOf } from '../network/tap.js';
import { NodeMetrics } from './node-metrics.js';
import { buildNodeView, templateFacts } from './node-view.js';
import { readopt } from './readopt.js';
import { SandboxCalls, type Entry } from './sandbox-calls.js';
import { NodeEvents } from './node-events.js';
import { runStartCommand } from './start-cmd.js';
import { checkVolumes } from './volumes.js';
import { canTransition } from './state-machine.js';
import type { NodeApi, NodeCreateRequest, NodeEvent, NodeSnapshot } from './types.js';
import { claimedMeta, fitsWarm, templateKey, warmMeta, warmRoom } from './warm-plan.js';
import { WarmPool, type Warm } from './warm-pool.js';
import { newSandboxID } from '../ids.js';

/** How often each sandbox's disk use is read (one sysfs file per sandbox; a change of 1 MiB or 1% of its limit is published). */
const DISK_SAMPLE_MS = 5_000;

/** Where templates come from (TemplateStore in src/templates/store.ts). */
export interface TemplateCatalog {
  /** 130404 when unknown. */
  resolve(name: string): Promise<TemplateRef>;
  listTemplates(): Promise<TemplateRef[]>;
  /** Cluster compute nodes (templates/fetch.ts): the layers held and the fetches in progress, for the node view. */
  layerFacts?(): Promise<{ layers: string[]; fetching: string[] }>;
}

export interface CubeletOptions {
  nodeID: string;
  dataDir: string;
  driver: RuntimeDriver;
  network: NetworkAgent;
  templates: TemplateCatalog;
  /** The config in force (follows hot reload). */
  config: () => Config;
  log: Logger;
  /** Slots the node's address range holds at most (for "pool exhausted"). */
  poolSlotLimit: number;
  /** Liveness and OOM watch period. */
  watchIntervalMs?: number;
  /** Where the host's CPU, memory and disk figures come from (default: read for this node alone). */
  host?: HostReadings;
  /** Where the sandboxes' meta is kept (default: meta.json in each sandbox's directory). */
  meta?: MetaKeeper;
}

// setTimeout keeps at most 2^31-1 ms; longer timeouts re-arm.
const MAX_TIMER_MS = 2 ** 31 - 1;

export class Cubelet extends SandboxCalls implements NodeApi {
  /** The node's events to its listeners (the heartbeat, in-process watchers). */
  private readonly events: NodeEvents;
  private watchTimer?: NodeJS.Timeout;
  /** stop() has begun: the watch's late findings are left to the next start. */
  private stopping = false;
  private diskTimer?: NodeJS.Timeout;
  /** Timer jobs running now (see once()). */
  private readonly timerJobs = new Set<string>();
  /** The host's figures and the node's CPU use, sampled for node views. */
  private readonly metrics: NodeMetrics;
  /** Started sandboxes of start-command templates, handed to creates (warm-pool.ts); in `entries` under their runtime ids. */
  private readonly warm: WarmPool;

  constructor(private readonly o: CubeletOptions) {
    super(o.nodeID, o.driver, o.meta ?? META_FILES);
    this.events = new NodeEvents(o.log);
    this.metrics = new NodeMetrics({ dataDir: o.dataDir, driver: o.driver, host: o.host ?? HOST });
    this.warm = new WarmPool({
      config: o.config,
      log: o.log,
      make: (t, spec) => this.makeWarm(t, spec),
      destroy: (runtimeID) => this.destroySandbox(runtimeID),
      room: async (spec) => warmRoom({ ...(await this.density()), spec }),
      busy: () => [...this.entries.values()].some((e) => !e.meta.warm && e.view.state === 'creating'),
      current: async (t) => {
        const ref = await o.templates.resolve(t).catch(() => undefined); // gone: its warm sandboxes are dropped
        return ref && templateKey(ref);
      },
    });
  }

  /** Reconciles with what the kernel holds: re-adopts complete live sandboxes, removes everything else. */
  async start(): Promise<{ adopted: string[]; removed: string[] }> {
    const { driver, network, log } = this.o;
    await driver.init();
    const { adopted, removed, lost } = await readopt({ driver, network, meta: this.meta, nodeID: this.nodeID });
    for (const { sandboxID, reason, message } of lost) this.reportDeath(sandboxID, reason, message);
    for (const { h, meta, slot } of adopted) {
      const entry = this.newEntry(meta, meta.paused ? 'paused' : 'running');
      entry.handle = h;
      entry.slot = slot;
      entry.view.ip = slot.sandboxIp;
      this.entries.set(meta.sandboxID, entry);
      this.armTimer(entry);
    }
    log.info({ adopted: adopted.map((f) => f.meta.sandboxID), removed }, 'cubelet reconciled with the kernel');
    this.warm.start();
    const period = this.o.watchIntervalMs ?? 1000;
    this.watchTimer = setInterval(
      () =>
        void this.once('watch', () =>
          watchLiveness(this.entries.values(), { driver, log, died: (e, d) => this.died(e, d), oom: (e, m) => this.noteOom(e, m) }),
        ),
      period,
    );
    this.watchTimer.unref();
    if (driver.storage) {
      this.diskTimer = setInterval(
        () =>
          void this.once('disk', () =>
            this.metrics.sampleDisk([...this.entries.values()], { held: (id) => this.entries.has(id), publish: (e) => this.emitSandbox(e), log: this.o.log }),
          ),
        DISK_SAMPLE_MS,
      );
      this.diskTimer.unref();
    }
    return { adopted: adopted.map((f) => f.meta.sandboxID), removed };
  }

  /**
   * Graceful: sandboxes keep running for the next start. destroy: nothing of this node stays on the
   * host. A graceful stop with no sandbox left releases the host's objects too (the cgroup parents,
   * the pool and its nftables tables, the store's mount; the data stays): the next start makes them
   * again, and a stopped daemon with nothing to keep left them behind for good.
   */
  async stop(opts: { destroy: boolean }): Promise<void> {
    this.stopping = true;
    clearInterval(this.watchTimer);
    clearInterval(this.diskTimer);
    // Warm sandboxes go even when the others stay: the next start would destroy them anyway.
    for (const id of await this.warm.stop()) await this.destroySandbox(id).catch((err: unknown) => this.o.log.error({ err }, 'warm sandbox destroy failed'));
    for (const e of this.entries.values()) clearTimeout(e.timer);
    if (opts.destroy) await Promise.allSettled([...this.entries.keys()].map((id) => this.destroySandbox(id)));
    const release = opts.destroy || this.entries.size === 0;
    if (release) await this.o.driver.cleanup(new Set());
    await this.o.network.stop({ destroy: release });
    await this.o.driver.close?.(opts);
  }

  /** Notices from the node's other agents (e.g. the network pool running dry) as node events. */
  report(kind: EventKind, message: string, extra: Partial<Pick<EventView, 'code' | 'durationMs'>> = {}): void {
    this.emitEvent(kind, message, extra);
  }

  subscribe(listener: (e: NodeEvent) => void, opts?: { backlog?: boolean }): () => void {
    return this.events.subscribe(listener, opts);
  }

  /** The node's volumes (its runtime's), in process. */
  get volumes(): RuntimeDriver['volumes'] {
    return this.o.driver.volumes;
  }

  async createSandbox(req: NodeCreateRequest): Promise<SandboxView> {
    const id = req.sandboxID;
    if (this.entries.has(id)) throw new CubeError('CONFLICT', `sandbox ${id} already exists`);
    // A control of a version before numeric times sends ISO 8601: its timer would fire at once.
    if (!Number.isFinite(req.endAt))
      throw new CubeError('BAD_REQUEST', `endAt ${String(req.endAt)} is not a time (epoch ms): control and nodes must run the same version`);
    // Checked before anything is made: a bad destination, or one the node's deny list closes.
    const egress = resolveEgress(req.egress, this.o.config().cubelet.plugins['io.cubelet.internal.v1.network'].deny_out);
    const runtime = this.runtimeFor(req);
    const t0 = performance.now();
    const meta: SandboxMeta = {
      sandboxID: id,
      templateID: req.templateID,
      spec: { cpus: req.cpus, memoryMiB: req.memoryMiB, diskGiB: req.diskGiB },
      slotIndex: -1,
      startedAt: stamp(), // a view stamped later counts it (registered below, before any await)
      endAt: req.endAt,
      metadata: { ...req.metadata },
      env: { ...req.env },
      paused: false,
      ...(egress ? { egress, egressAsked: req.egress! } : {}),
      ...(req.lifecycle ? { lifecycle: { ...req.lifecycle } } : {}),
      ...(req.owner !== undefined ? { owner: req.owner } : {}),
      ...(runtime ? { runtime } : {}),
      ...(req.fromSnapshot !== undefined ? { fromSnapshot: req.fromSnapshot } : {}),
      ...(req.volumes?.length ? { volumes: checkVolumes(req.volumes, this.o.driver) } : {}),
    };
    if (req.fromSnapshot !== undefined) this.snapshotKeeper();
    const warm = this.warm.take(req.templateID, (w) => fitsWarm(w, meta));
    const claimed = warm && (await this.claim(warm, meta, t0));
    this.warm.served(req.templateID, claimed !== undefined);
    if (claimed) return claimed;
    const entry = this.newEntry(meta, 'creating');
    this.entries.set(id, entry);
    this.emitSandbox(entry);
    // Warm sandboxes give their room back first (a node holding none goes straight on).
    const run = (this.warm.holding() ? this.warm.kick() : Promise.resolve()).then(() => this.runCreate(entry));
    entry.op = run;
    try {
      await run;
    } catch (e) {
      const err = isCubeError(e) ? e : new CubeError('CREATE_FAILED', `create ${id}: ${(e as Error).message}`, { cause: e });
      this.emitEvent('sandbox.error', `create failed: ${err.message}`, { sandboxID: id, code: err.code });
      throw err;
    } finally {
      entry.op = undefined;
      void this.warm.kick();
    }
    this.emitEvent('sandbox.created', `created from ${req.templateID}${req.fromSnapshot !== undefined ? ` and snapshot ${req.fromSnapshot}` : ''}`, {
      sandboxID: id,
      durationMs: Math.round(performance.now() - t0),
    });
    return { ...entry.view };
  }

  private async runCreate(entry: Entry): Promise<void> {
    const { driver, network } = this.o;
    const { meta } = entry;
    const id = meta.sandboxID;
    let rules: Promise<void> | undefined;
    try {
      const asked = limitAsk(meta.metadata);
      if ('problem' in asked) throw new CubeError('BAD_REQUEST', asked.problem);
      const template = await this.o.templates.resolve(meta.templateID);
      if (template.config?.startCmd && !meta.warm) this.warm.used(meta.templateID);
      if (meta.runtime === undefined && template.config?.runtime !== undefined) {
        meta.runtime = entry.view.runtime = this.offered(template.config.runtime, `the default runtime of template ${template.name}`);
      }
      // A microVM's QEMU attaches to the TAP its slot was made with (the TAP pool).
      const mode = slotModeOf(meta.runtime ?? driver.name);
      entry.slot = await network.acquire(id, mode);
      meta.slotIndex = entry.slot.index;
      if (mode !== 'ns') meta.slotMode = mode;
      // Alongside the driver's work (one `nft` run): in place before the create returns, so before
      // anything runs in the sandbox (its init sends nothing).
      rules = meta.egress ? network.setEgress(id, meta.egress) : undefined;
      rules?.catch(() => undefined); // handled below; a rejection before the create ends must not count as unhandled
      if (template.config?.workdir) meta.workdir = template.config.workdir;
      entry.handle = await driver.create({
        sandboxID: id,
        template,
        cpus: meta.spec.cpus,
        memoryMiB: meta.spec.memoryMiB,
        pidsMax: this.o.config().master.sandbox.pids_max,
        netnsPath: entry.slot.netnsPath,
        env: { ...template.config?.env, ...meta.env },
        diskGiB: meta.spec.diskGiB,
        ...(meta.runtime ? { runtime: meta.runtime } : {}),
        ...(meta.metadata['cube.net_raw'] === 'true' ? { netRaw: true } : {}),
        ...(Object.keys(asked.ask).length > 0 ? { limits: asked.ask } : {}),
        ...(meta.fromSnapshot !== undefined ? { fromSnapshot: meta.fromSnapshot } : {}),
        ...(meta.volumes ? { volumes: meta.volumes } : {}),
      });
      await rules;
      if (template.config?.startCmd) {
        const { readyAfterMs } = await runStartCommand(template.config, {
          start: (r) => this.spawnIn(entry, r),
          exec: (r) => driver.exec(entry.handle!, { ...r, env: { ...meta.env, ...r.env } }),
          defaultReadyTimeoutSec: this.o.config().master.sandbox.ready_timeout_sec,
        });
        this.o.log.debug({ sandboxID: id, readyAfterMs }, 'start command ready');
      }
      await this.meta.write(entry.handle.dir, meta);
    } catch (e) {
      // Nothing half-made: undo in reverse order; each undo is idempotent.
      await rules?.catch(() => undefined); // settled before the slot (and its rules) is released
      await driver.destroy(id).catch((err: unknown) => this.o.log.error({ err, sandboxID: id }, 'undo of a failed create: driver destroy failed'));
      if (entry.slot)
        await network.release(id).catch((err: unknown) => this.o.log.error({ err, sandboxID: id }, 'undo of a failed create: slot release failed'));
      this.entries.delete(id);
      if (!meta.warm) this.emit({ type: 'sandbox.removed', sandboxID: id });
      throw e;
    }
    entry.view.ip = entry.slot.sandboxIp;
    this.setState(entry, 'running');
    this.armTimer(entry);
  }

  /**
   * A create served by a warm sandbox: the entry made under its runtime id takes the create's id,
   * env (commands get it, as any sandbox's), metadata, owner, lifecycle, egress rules and timeout;
   * nothing is started again. Its start command ran with the template's env alone and under the
   * node's default egress (rules asked for hold from the claim on, as after E2B's snapshot
   * restore), and its hostname is its runtime id. One found dead is destroyed: the create is made cold.
   */
  private async claim(w: Warm, meta: SandboxMeta, t0: number): Promise<SandboxView | undefined> {
    const entry = this.entries.get(w.runtimeID);
    const template = await this.o.templates.resolve(meta.templateID).catch(() => undefined); // gone: the cold create says so
    if (!entry?.handle || entry.view.state !== 'running' || !this.o.driver.alive(entry.handle) || !template || templateKey(template) !== w.made) {
      await this.destroySandbox(w.runtimeID).catch((err: unknown) => this.o.log.error({ err }, 'warm sandbox destroy failed'));
      return undefined;
    }
    const id = meta.sandboxID;
    entry.meta = claimedMeta(entry.meta, meta);
    entry.view = { ...this.viewOf(entry.meta, 'running'), ...(entry.view.ip ? { ip: entry.view.ip } : {}) };
    entry.procs.sandboxID = id;
    this.entries.delete(w.runtimeID);
    this.entries.set(id, entry);
    try {
      if (meta.egress) await this.o.network.setEgress(w.runtimeID, meta.egress);
      await this.meta.write(entry.handle.dir, entry.meta);
    } catch (e) {
      await this.destroySandbox(id).catch(() => undefined); // the create's error is the one to report
      throw new CubeError('CREATE_FAILED', `create ${id} from a warm sandbox: ${(e as Error).message}`, { cause: e });
    }
    this.armTimer(entry);
    this.emitSandbox(entry);
    this.emitEvent('sandbox.created', `created from ${meta.templateID} (a warm sandbox)`, { sandboxID: id, durationMs: Math.round(performance.now() - t0) });
    void this.warm.kick();
    return { ...entry.view };
  }

  /**
   * One warm sandbox of the template: a create through runCreate under an internal id (never shown:
   * lists, views and events leave it out), with the template's env alone and no timeout (its pool
   * ends it).
   */
  private async makeWarm(templateID: string, spec: SandboxSpecView): Promise<Warm> {
    const template = await this.o.templates.resolve(templateID);
    if (!template.config?.startCmd) throw new CubeError('BAD_REQUEST', `template ${templateID} has no start command: nothing to keep warm`);
    const meta = warmMeta(newSandboxID(), templateID, spec);
    const id = meta.sandboxID;
    const entry = this.newEntry(meta, 'creating');
    this.entries.set(id, entry);
    await this.asOp(entry, this.runCreate(entry));
    return { runtimeID: id, spec: meta.spec, runtime: entry.view.runtime, made: templateKey(template) };
  }

  async destroySandbox(sandboxID: string): Promise<void> {
    const entry = this.entries.get(sandboxID);
    if (!entry) return;
    if (entry.view.state === 'destroying' && entry.op) {
      await entry.op;
      return;
    }
    // A create, pause or resume in flight finishes first; a failed create removes itself.
    if (entry.op) await entry.op.catch(() => {});
    if (!this.entries.has(sandboxID) || entry.view.state === 'destroying') return this.destroySandbox(sandboxID);
    const t0 = performance.now();
    await this.asOp(entry, this.runDestroy(entry));
    if (!entry.meta.warm) this.emitEvent('sandbox.destroyed', 'destroyed', { sandboxID, durationMs: Math.round(performance.now() - t0) });
  }

  private async runDestroy(entry: Entry): Promise<void> {
    const id = entry.view.sandboxID;
    const rid = runtimeIdOf(entry.meta);
    this.setState(entry, 'destroying');
    clearTimeout(entry.timer);
    entry.procs.killAll();
    // Both always run: a failing driver destroy must not keep the slot, nor the reverse. The slot
    // goes back after the processes are gone, so its reset does not find them and retire it.
    const [d] = await Promise.allSettled([this.o.driver.destroy(rid)]);
    const [n] = await Promise.allSettled([this.o.network.release(rid, { processesGone: d.status === 'fulfilled' })]);
    const failed = [d, n].filter((r): r is PromiseRejectedResult => r.status === 'rejected');
    if (failed.length > 0) {
      const msg = failed.map((f) => (f.reason as Error).message).join('; ');
      this.setState(entry, 'error', `destroy failed: ${msg}`);
      throw new CubeError('DESTROY_FAILED', `destroy ${id}: ${msg}`);
    }
    this.setState(entry, 'gone');
    this.entries.delete(id);
    if (!entry.meta.warm) this.emit({ type: 'sandbox.removed', sandboxID: id });
  }

  async pauseSandbox(sandboxID: string, opts?: PauseOptions): Promise<SandboxView> {
    return this.freezeOp(sandboxID, 'pause', undefined, opts);
  }

  async resumeSandbox(sandboxID: string): Promise<SandboxView> {
    return this.freezeOp(sandboxID, 'resume');
  }

  /** `reason`: why a pause happened other than on request (shown with the paused state). */
  private async freezeOp(sandboxID: string, op: 'pause' | 'resume', reason?: string, opts?: PauseOptions): Promise<SandboxView> {
    const pending = this.entries.get(sandboxID);
    await pending?.snapshotting?.catch(() => undefined); // waited for, not reported: the snapshot's caller has its error
    // A resume that meets a pause in progress (its timeout fired as the client connected)
    // resumes once the pause is done: a 503 there failed E2B's connect right after it read `paused`.
    if (op === 'resume' && pending?.view.state === 'pausing') await pending.op?.catch(() => undefined);
    const entry = this.ready(sandboxID, op);
    const [during, after, before] = op === 'pause' ? (['pausing', 'paused', 'running'] as const) : (['resuming', 'running', 'paused'] as const);
    const t0 = performance.now();
    this.setState(entry, during, reason);
    const run = (async () => {
      try {
        if (op === 'pause') await this.o.driver.pause(entry.handle!, opts);
        else await this.o.driver.resume(entry.handle!);
        entry.meta.paused = op === 'pause';
        // A paused sandbox does not time out; one resumed past its end gets a fresh default lifetime.
        if (op === 'resume' && entry.meta.endAt <= Date.now()) {
          entry.meta.endAt = entry.view.endAt = Date.now() + this.o.config().master.sandbox.default_timeout_sec * 1000;
          this.armTimer(entry);
        }
        await this.meta.write(entry.handle!.dir, entry.meta);
      } catch (e) {
        this.setState(entry, before);
        throw new CubeError(op === 'pause' ? 'PAUSE_FAILED' : 'RESUME_FAILED', `${op} ${sandboxID}: ${(e as Error).message}`, { cause: e });
      }
      this.setState(entry, after, reason);
    })();
    await this.asOp(entry, run);
    this.emitEvent(op === 'pause' ? 'sandbox.paused' : 'sandbox.resumed', op === 'pause' ? 'paused' : 'resumed', {
      sandboxID,
      durationMs: Math.round(performance.now() - t0),
    });
    return { ...entry.view };
  }

  async setEgress(sandboxID: string, req: EgressRequest): Promise<SandboxView> {
    const entry = this.ready(sandboxID, 'setEgress');
    const rules = resolveEgress(req, this.o.config().cubelet.plugins['io.cubelet.internal.v1.network'].deny_out);
    await this.o.network.setEgress(runtimeIdOf(entry.meta), rules);
    if (rules) {
      entry.meta.egress = rules;
      entry.meta.egressAsked = entry.view.egress = { ...req };
    } else {
      delete entry.meta.egress;
      delete entry.meta.egressAsked;
      delete entry.view.egress;
    }
    if (entry.handle) await this.meta.write(entry.handle.dir, entry.meta);
    this.emitSandbox(entry);
    this.emitEvent('sandbox.network', rules ? `egress rules: ${describeEgress(rules)}` : "egress rules cleared: the node's defaults apply", { sandboxID });
    return { ...entry.view };
  }

  async setEndAt(sandboxID: string, endAt: number): Promise<SandboxView> {
    const entry = this.ready(sandboxID, 'setEndAt');
    if (!Number.isFinite(endAt)) throw new CubeError('BAD_REQUEST', `endAt ${endAt} is not a time (epoch ms)`);
    entry.view.endAt = endAt;
    entry.meta.endAt = endAt;
    if (entry.handle) await this.meta.write(entry.handle.dir, entry.meta);
    this.armTimer(entry);
    this.emitSandbox(entry);
    return { ...entry.view };
  }

  /**
   * Live use of every running and paused sandbox: its cgroup counters (no walk of its files: the
   * disk figure is the quota group's, as sampled), its link's byte counters. A sandbox whose
   * counters cannot be read (going away) is left out.
   */
  async sandboxUsage(): Promise<SandboxUsage[]> {
    return this.metrics.sandboxUsage(this.real());
  }

  /** The node's capacity, its host's memory and its real sandboxes: what its density is computed from. */
  private async density() {
    const cfg = this.o.config();
    const quota = cfg.cubelet.quota;
    const host = await this.metrics.hostSample();
    const capacity = {
      cpus: quota?.cpus ?? hostCpus(),
      memoryMiB: quota?.memory_mib ?? host.memTotalMiB,
      declared: quota?.cpus !== undefined || quota?.memory_mib !== undefined,
    };
    // Stamped when the sandboxes are read, not when the view is done (awaits later): the control
    // counts a placement on top of a view stamped before it, so a later stamp would hide creates.
    // The process's strict stamp (model/time.ts): exactly before or after a create's or destroy's.
    return { cfg, host, capacity, master: cfg.master, memAvailableMiB: host.memAvailableMiB, real: this.real().map((e) => e.view), at: new Date(stamp()) };
  }

  async nodeView(): Promise<NodeView> {
    const { network, driver } = this.o;
    const { cfg, host, capacity, real, at } = await this.density();
    const cpu = this.metrics.sampleCpu(capacity.cpus);
    return buildNodeView({
      nodeID: this.nodeID,
      runtime: driver.name,
      runtimes: driver.runtimes?.() ?? [{ name: driver.name }],
      capacity,
      cpuUtilPercent: cpu.host,
      // A driver that can tell reports from the start (0 before its first two samples): the host's
      // figure must never gate a node whose sandboxes can be measured, not even for its first second.
      ...(this.o.driver.cpuUsageUsec ? { sandboxCpuUtilPercent: cpu.sandboxes ?? 0 } : {}),
      memAvailableMiB: host.memAvailableMiB,
      memTotalMiB: host.memTotalMiB,
      diskUsedPercent: host.diskUsedPercent,
      ...(host.store ? { store: host.store } : {}),
      master: cfg.master,
      sandboxes: real,
      warm: this.warm.view(),
      pool: network.levels(),
      ...(this.offers('microvm') ? { tapPool: network.levels('tap') } : {}),
      poolSlotLimit: this.o.poolSlotLimit,
      ...templateFacts(await this.o.templates.listTemplates()),
      ...(this.o.templates.layerFacts ? { layerFacts: await this.o.templates.layerFacts() } : {}),
      now: at,
    });
  }

  private setState(entry: Entry, to: SandboxState, reason?: string): void {
    const from = entry.view.state;
    if (from === to) return;
    if (!canTransition(from, to)) throw new CubeError('INTERNAL', `illegal transition ${from} -> ${to} for ${entry.view.sandboxID}`);
    entry.view.state = to;
    if (reason !== undefined) entry.view.reason = reason;
    else if (to !== 'running') delete entry.view.reason;
    if (to !== 'gone') this.emitSandbox(entry);
  }

  private armTimer(entry: Entry): void {
    clearTimeout(entry.timer);
    const ms = entry.view.endAt - Date.now();
    entry.timer = setTimeout(
      () => {
        if (entry.view.endAt > Date.now()) return this.armTimer(entry);
        if (entry.view.state === 'paused') return;
        const id = entry.view.sandboxID;
        if (entry.meta.lifecycle?.onTimeout === 'pause') {
          this.emitEvent('sandbox.timeout', `timeout reached at ${isoTime(entry.view.endAt)}: pausing (lifecycle onTimeout pause)`, { sandboxID: id });
          // A sandbox busy with another operation is looked at again in a second.
          this.freezeOp(id, 'pause', `paused at its timeout ${isoTime(entry.view.endAt)} (lifecycle onTimeout pause)`, { release: true }).catch(
            (err: unknown) => {
              if (isCubeError(err) && err.kind === 'SANDBOX_BUSY') entry.timer = setTimeout(() => this.armTimer(entry), 1000);
              else this.o.log.error({ err, sandboxID: id }, 'pause on timeout failed');
            },
          );
          return;
        }
        this.emitEvent('sandbox.timeout', `timeout reached at ${isoTime(entry.view.endAt)}`, { sandboxID: id });
        void this.end(id, 'timeout', `timeout reached at ${isoTime(entry.view.endAt)}`);
      },
      Math.max(0, Math.min(ms, MAX_TIMER_MS)),
    );
    entry.timer.unref();
  }

  /** Runs a timer's job unless its previous run is still going: slow rounds never pile up. */
  private async once(job: 'watch' | 'disk', run: () => Promise<void>): Promise<void> {
    if (this.timerJobs.has(job)) return;
    this.timerJobs.add(job);
    try {
      await run();
    } finally {
      this.timerJobs.delete(job);
    }
  }

  /** A sandbox found dead by the liveness watch: `error`, then ended with the reason (its resources go back now, not at its timeout). */
  private died(entry: Entry, death: { reason: DeathReason; message: string }): void {
    if (this.stopping) return; // a round of the watch still in flight: the next start judges it
    if (entry.meta.warm) {
      // Nobody's sandbox: out of its pool, destroyed without a tombstone; the pool makes another.
      this.warm.forget(entry.view.sandboxID);
      void this.destroySandbox(entry.view.sandboxID).catch((err: unknown) => this.o.log.error({ err, death }, 'destroy of a dead warm sandbox failed'));
      return;
    }
    this.setState(entry, 'error', death.message);
    this.emitEvent('sandbox.error', death.message, { sandboxID: entry.view.sandboxID });
    void this.end(entry.view.sandboxID, death.reason, death.message);
  }

  /** Destroys a sandbox that ended without being asked, then reports why (sandbox.died). */
  private async end(sandboxID: string, reason: DeathReason, message: string): Promise<void> {
    try {
      await this.destroySandbox(sandboxID);
    } catch (err) {
      this.o.log.error({ err, sandboxID, reason }, 'destroy of a sandbox that ended failed');
    }
    this.reportDeath(sandboxID, reason, message);
  }

  private reportDeath(sandboxID: string, reason: DeathReason, message: string): void {
    this.emitEvent('sandbox.died', message, { sandboxID, death: reason, code: deathCode(reason) });
  }

  protected noteOom(entry: Entry, message: string): void {
    entry.view.reason = `OOM: ${message}`;
    this.emitEvent('sandbox.oom', message, { sandboxID: entry.view.sandboxID });
    this.emitSandbox(entry);
  }

  private emitSandbox(entry: Entry): void {
    if (!entry.meta.warm) this.emit({ type: 'sandbox', sandbox: { ...entry.view } });
  }

  protected emitEvent(kind: EventKind, message: string, extra: Partial<Omit<EventView, 'id' | 'at' | 'kind' | 'message'>> = {}): void {
    this.emit({ type: 'event', event: { at: Date.now(), kind, nodeID: this.nodeID, message, ...extra } });
  }

  private emit(e: NodeEvent): void {
    this.events.emit(e);
  }
}
