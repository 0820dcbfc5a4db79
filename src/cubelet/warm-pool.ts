// Warm pools (issue 26 item 3): started-and-ready sandboxes of templates with a start command,
// handed to a create of their template so it returns at once instead of after the start command:
// through the e2b SDK at c=1, 8.9 ms against 3.1 s at p50 for a start command ready after 3 s, and
// 7.9 ms against 5.8 s for the code interpreter (bench/warm.ts, docs/benchmarks.md).
//
// Chosen over a memory snapshot: the ns runtime (the default, and the only one where KVM is
// missing) has none, and a warm sandbox is the same create as any other (the cubelet's create
// path, under an internal runtime id; the claim gives it the public id and its identity). The
// microvm runtime restores from memory snapshots already (runtime/microvm).
//
// What the pool holds (the decisions are warm-plan.ts): a pool per template wanted, made one at a
// time on the node and never while a real create is in flight (a refill competes with creates at
// most one at a time: a code-interpreter create is seconds of both cores); room only where the
// real sandboxes leave it, given back before a create is made and under memory pressure. A
// template whose make failed waits a back-off (doubling from 30 s to 15 min) before the next try.
import type { Logger } from 'pino';
import type { Config } from '../config/schema.js';
import { isCubeError } from '../errors.js';
import type { WarmView } from '../model/node.js';
import type { SandboxSpecView } from '../model/sandbox.js';
import { densityParamsFromConfig, footprintMiB } from '../model/density.js';
import { fitsWarm, nextStep, targetSizes, type PoolLevel } from './warm-plan.js';

/** How often the pool looks at its room (memory pressure, idle templates) when nothing else woke it. */
const TICK_MS = 2_000;
const BACKOFF_MS = { first: 30_000, max: 15 * 60_000 };

/** A ready warm sandbox: its runtime id, the spec, runtime and template content it was made with. */
export interface Warm {
  runtimeID: string;
  spec: SandboxSpecView;
  runtime: string;
  /** templateKey() of the template it was made from: one removed or imported anew since serves no create. */
  made: string;
}

export interface WarmHooks {
  config(): Config;
  log: Logger;
  /** Makes one warm sandbox of the template through the create path; resolves once its start command is ready. */
  make(templateID: string, spec: SandboxSpecView): Promise<Warm>;
  /** Destroys one (a missing one is no error). */
  destroy(runtimeID: string): Promise<void>;
  /** How many warm sandboxes of `spec` the node has room for beside its real ones now (warmRoom). */
  room(spec: SandboxSpecView): Promise<number>;
  /** A real create is in flight: no make starts now. */
  busy(): boolean;
  /** templateKey() of the template now; undefined when it is gone. */
  current(templateID: string): Promise<string | undefined>;
}

export class WarmPool {
  private readonly ready = new Map<string, Warm[]>();
  private readonly lastCreate = new Map<string, number>();
  private readonly failed = new Map<string, { until: number; backoff: number }>();
  private making?: string;
  private makeRun?: Promise<void>;
  private hits = 0;
  private misses = 0;
  private timer?: NodeJS.Timeout;
  private running?: Promise<void>;
  /** Kicks asked for: a round runs again when one came in while it ran. */
  private asked = 0;
  private stopped = false;

  constructor(private readonly h: WarmHooks) {}

  start(): void {
    this.timer = setInterval(() => void this.kick(), TICK_MS);
    this.timer.unref();
    void this.kick();
  }

  /** No more makes: waits for the one being made (destroyed as it is ready), returns the ready ones' runtime ids for the caller to destroy. */
  async stop(): Promise<string[]> {
    this.stopped = true;
    clearInterval(this.timer);
    await this.makeRun;
    const all = [...this.ready.values()].flat().map((w) => w.runtimeID);
    this.ready.clear();
    return all;
  }

  /** Some warm sandbox is ready or being made. */
  holding(): boolean {
    return this.making !== undefined || [...this.ready.values()].some((l) => l.length > 0);
  }

  /** A create of a template with a start command reached the node: its pool is wanted (again) for idle_sec. */
  used(templateID: string): void {
    this.lastCreate.set(templateID, Date.now());
  }

  /** Takes a ready warm sandbox of the template that `fits` the create (its spec and runtime), the oldest first; undefined: none. */
  take(templateID: string, fits: (w: Warm) => boolean): Warm | undefined {
    const list = this.ready.get(templateID) ?? [];
    const i = list.findIndex(fits);
    return i >= 0 ? list.splice(i, 1)[0] : undefined;
  }

  /** How a create of the template was served: a hit (a warm sandbox), else a miss when the template is wanted. */
  served(templateID: string, warm: boolean): void {
    if (warm) this.hits++;
    else if (this.targets().has(templateID)) this.misses++;
  }

  /** A ready warm sandbox that ended (the liveness watch found it dead): out of the pool. */
  forget(runtimeID: string): void {
    for (const list of this.ready.values()) {
      const i = list.findIndex((w) => w.runtimeID === runtimeID);
      if (i >= 0) list.splice(i, 1);
    }
  }

  /**
   * Looks at the pools now: drops what is not wanted or has no room, starts a make. Resolves once a
   * round that began after the call is done (a create awaits it so its room is given back first).
   */
  kick(): Promise<void> {
    this.asked++;
    if (this.running) return this.running;
    this.running = (async () => {
      let seen;
      do {
        seen = this.asked;
        try {
          await this.round();
        } catch (err) {
          this.h.log.error({ err }, 'warm pool round failed');
        }
      } while (this.asked !== seen);
    })().finally(() => (this.running = undefined));
    return this.running;
  }

  view(): WarmView {
    const targets = this.targets();
    const templates: WarmView['templates'] = {};
    for (const l of this.levels()) templates[l.template] = { ready: l.ready, starting: l.starting, target: targets.get(l.template) ?? 0 };
    for (const [t, n] of targets) templates[t] ??= { ready: 0, starting: 0, target: n };
    const params = densityParamsFromConfig(this.h.config().master);
    const held = [...this.ready.values()].flat().reduce((n, w) => n + footprintMiB(w.spec, params), 0);
    return { templates, footprintMiB: Math.round(held * 10) / 10, hits: this.hits, misses: this.misses };
  }

  private targets(): Map<string, number> {
    return targetSizes(this.h.config().cubelet.warm_pool, this.lastCreate, Date.now());
  }

  private levels(): PoolLevel[] {
    const names = new Set([...this.ready.keys(), ...(this.making ? [this.making] : [])]);
    return [...names].map((t) => ({ template: t, ready: this.ready.get(t)?.length ?? 0, starting: this.making === t ? 1 : 0 }));
  }

  private spec(): SandboxSpecView {
    const s = this.h.config().master.sandbox.default_spec;
    return { cpus: s.cpus, memoryMiB: s.memory_mib, diskGiB: s.disk_gib };
  }

  private async round(): Promise<void> {
    // A round follows every create: on a node that wants and holds no warm sandbox (no start-command
    // template used lately) it reads nothing (the node's room below walks every sandbox).
    const targets = this.targets();
    if (targets.size === 0 && this.ready.size === 0 && this.making === undefined) return;
    const spec = this.spec();
    // A warm sandbox made with another default spec than today's, or from a template since removed
    // or imported anew, fits no create: dropped.
    for (const [t, list] of this.ready) {
      const now = await this.h.current(t);
      const stale = list.filter((w) => w.made !== now || !fitsWarm(w, { spec, metadata: {} }));
      for (const w of stale) await this.drop(t, w);
    }
    const now = Date.now();
    const skip = new Set([...this.failed].filter(([, f]) => f.until > now).map(([t]) => t));
    const step = nextStep(targets, this.levels(), this.stopped ? 0 : await this.h.room(spec), skip);
    for (const t of step.drop) {
      const w = this.ready.get(t)?.at(-1);
      if (w) await this.drop(t, w);
    }
    if (step.make && !this.stopped && !this.h.busy()) this.makeOne(step.make, spec);
  }

  private async drop(templateID: string, w: Warm): Promise<void> {
    this.forget(w.runtimeID);
    if (this.ready.get(templateID)?.length === 0) this.ready.delete(templateID);
    await this.h.destroy(w.runtimeID).catch((err: unknown) => this.h.log.error({ err, templateID }, 'destroy of a warm sandbox failed'));
  }

  private makeOne(templateID: string, spec: SandboxSpecView): void {
    this.making = templateID;
    const t0 = performance.now();
    this.makeRun = this.h
      .make(templateID, spec)
      .then((w) => {
        this.failed.delete(templateID);
        this.h.log.info({ templateID, ms: Math.round(performance.now() - t0) }, 'warm sandbox ready');
        if (this.stopped) return this.h.destroy(w.runtimeID);
        this.ready.set(templateID, [...(this.ready.get(templateID) ?? []), w]);
      })
      .catch((err: unknown) => {
        // A template removed since its last create is no longer wanted (one named in warm_pool.templates still is: it may come back).
        if (isCubeError(err) && err.kind === 'NOT_FOUND') this.lastCreate.delete(templateID);
        const backoff = Math.min(BACKOFF_MS.max, (this.failed.get(templateID)?.backoff ?? BACKOFF_MS.first / 2) * 2);
        this.failed.set(templateID, { until: Date.now() + backoff, backoff });
        this.h.log.warn({ err, templateID, retryInMs: backoff }, 'warm sandbox could not be made');
      })
      .finally(() => {
        this.making = this.makeRun = undefined;
        if (!this.stopped) void this.kick();
      });
  }
}
