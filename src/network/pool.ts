// The pool of free slots handed to sandboxes without a lock that serialises bursts. Node runs
// this on one thread, so taking a free slot is a pop; only creating slots touches the kernel
// (slot.ts), batched: demand that arrives in the same tick shares one batch.
import { performance } from 'node:perf_hooks';
import type { Logger } from 'pino';
import { CubeError } from '../errors.js';
import type { PoolView } from '../model/node.js';
import type { NetSlot, ReleaseOptions, SlotMode } from './types.js';
import type { Firewall } from './firewall.js';
import type { Slots } from './slot.js';
import type { SlotNames } from './slot-script.js';
import { RecentCount, WaitWindow } from './wait-stats.js';

export interface PoolNotice {
  kind: 'pool.exhausted';
  message: string;
  /** Allocations waiting when the pool ran dry. */
  waiting: number;
}

export interface SlotPoolOptions {
  tag: string;
  /** How this pool's slots are made. */
  mode: SlotMode;
  /** Free slots kept warm (tap_init_num for ns, microvm_tap_init_num for tap). */
  target: number;
  slots: Slots;
  firewall: Firewall;
  /** Runs a background task to its end (settled() waits for them). */
  track: (p: Promise<unknown>) => void;
  log?: Logger;
  onNotice?: (n: PoolNotice) => void;
}

interface Waiter {
  sandboxID: string;
  t0: number;
  resolve: (s: NetSlot) => void;
  reject: (e: unknown) => void;
}

/** Root batches stay short so the first waiters are not held behind a long refill. */
const MAX_BATCH = 64;
const REFILL_BACKOFF_MS = 1_000;
/**
 * Free slots a pool of 16 or more may lack before it refills (a quarter of the target): under
 * steady create/delete churn each released slot comes back through its reset, so refilling on
 * every acquire would build a new netns+veth per create (two `ip` runs and RTNL work on the
 * create's critical cores) and trim the surplus later. Smaller pools refill at once.
 */
export function refillSlack(initNum: number): number {
  return initNum >= 16 ? Math.floor(initNum / 4) : 0;
}
/** After this long without an acquire, free slots above tap_init_num (left by a burst) are removed. */
const TRIM_IDLE_MS = 5_000;

export class SlotPool {
  private free: NetSlot[] = [];
  private readonly inUse = new Map<string, NetSlot>();
  private readonly waiters: Waiter[] = [];
  /** A second acquire of a sandbox that is still waiting shares the first one's answer. */
  private readonly pending = new Map<string, Promise<NetSlot>>();
  private creating = 0;
  private resetting = 0;
  private onDemand = 0;
  private readonly onDemandRecent = new RecentCount();
  private readonly waits = new WaitWindow();
  private batchRunning = false;
  /** A batch is due on the next turn of the loop (settled() waits for it). */
  pumpScheduled = false;
  private refillBlockedUntil = 0;
  private running = false;
  private dryNoticeSent = false;
  private lastAcquire = 0;

  constructor(private readonly o: SlotPoolOptions) {}

  /** Start: empty, then the kept sandboxes' slots. */
  reset(adopted: Map<string, NetSlot>): void {
    this.free = [];
    this.inUse.clear();
    this.refillBlockedUntil = 0;
    for (const [sandboxID, slot] of adopted) this.inUse.set(sandboxID, slot);
  }

  held(): NetSlot[] {
    return [...this.inUse.values()];
  }

  holds(index: number): boolean {
    for (const s of this.inUse.values()) if (s.index === index) return true;
    return false;
  }

  open(): void {
    this.running = true;
  }

  /** Stops serving: waiters are refused; what is in flight finishes (and is removed, not pooled). */
  close(): void {
    this.running = false;
    for (const w of this.waiters.splice(0)) w.reject(new CubeError('NETWORK_FAILED', 'network agent is stopping'));
  }

  /** Stop: the free slots, handed over for removal; the in-use ones stay (or are forgotten with `inUseToo`). */
  takeFree(inUseToo: boolean): NetSlot[] {
    const out = this.free;
    this.free = [];
    if (inUseToo) this.inUse.clear();
    return out;
  }

  async acquire(sandboxID: string): Promise<NetSlot> {
    if (!this.running) throw new CubeError('NETWORK_FAILED', 'network agent is not running');
    const held = this.inUse.get(sandboxID);
    if (held) return held;
    const pending = this.pending.get(sandboxID);
    if (pending) return pending;
    const t0 = performance.now();
    this.lastAcquire = Date.now();
    const slot = this.free.pop();
    if (slot) {
      this.assign(sandboxID, slot, t0);
      this.pump();
      return slot;
    }
    this.onDemand++;
    this.onDemandRecent.record();
    const p = new Promise<NetSlot>((resolve, reject) => this.waiters.push({ sandboxID, t0, resolve, reject }));
    this.pending.set(sandboxID, p);
    const forget = () => this.pending.delete(sandboxID);
    p.then(forget, forget);
    if (!this.dryNoticeSent) {
      this.dryNoticeSent = true;
      const message = `${this.o.mode === 'tap' ? 'TAP' : 'network'} pool of node tag ${this.o.tag} ran dry (target ${this.o.target}, ${this.inUse.size} in use): creating slots on demand`;
      this.o.log?.warn({ waiting: this.waiters.length }, message);
      this.o.onNotice?.({ kind: 'pool.exhausted', message, waiting: this.waiters.length });
    }
    this.pump();
    return p;
  }

  /** True when the sandbox held a slot of this pool (now on its way back through a reset). */
  release(sandboxID: string, opts: ReleaseOptions = {}): boolean {
    const slot = this.inUse.get(sandboxID);
    if (!slot) return false;
    this.inUse.delete(sandboxID);
    this.resetting++;
    this.o.track(this.resetSlot(slot, opts));
    return true;
  }

  slotOf(sandboxID: string): NetSlot | undefined {
    return this.inUse.get(sandboxID);
  }

  /** The sandbox holds a slot of this pool or waits for one. */
  serves(sandboxID: string): boolean {
    return this.inUse.has(sandboxID) || this.pending.has(sandboxID);
  }

  levels(): PoolView {
    return {
      free: this.free.length,
      inUse: this.inUse.size,
      creating: this.creating,
      total: this.free.length + this.inUse.size + this.creating + this.resetting,
      target: this.o.target,
      inFlight: this.waiters.length,
      onDemand: this.onDemand,
      onDemandRecent: this.onDemandRecent.count(),
      ...this.waits.summary(),
    };
  }

  // --- allocation -------------------------------------------------------------------

  private assign(sandboxID: string, slot: NetSlot, t0: number): void {
    this.inUse.set(sandboxID, slot);
    this.waits.record(performance.now() - t0);
  }

  /**
   * A ready slot goes to the oldest waiter, else to the free list. A slot a waiter took leaves the
   * pool short of its target: nothing else asks for a refill then (the burst's last acquire came
   * before it ran dry), and after a 20-create burst on tap_init_num = 4 free stayed 0 until the
   * next create, which paid for an on-demand slot.
   */
  private offer(slot: NetSlot): void {
    const w = this.waiters.shift();
    if (w) {
      this.assign(w.sandboxID, slot, w.t0);
      w.resolve(slot);
      this.pump();
      return;
    }
    this.free.push(slot);
    this.dryNoticeSent = false;
  }

  /** Waiters not covered by slots already on their way. */
  private unservedWaiters(): number {
    return this.waiters.length - this.creating - this.resetting;
  }

  /** Schedules the next root batch; requests of the same tick share one batch. */
  pump(): void {
    if (this.pumpScheduled || !this.running) return;
    this.pumpScheduled = true;
    setImmediate(() => {
      this.pumpScheduled = false;
      this.startBatch();
    });
  }

  private startBatch(): void {
    if (this.batchRunning || !this.running) return;
    const demand = this.unservedWaiters();
    let n: number;
    if (demand > 0) {
      n = demand;
    } else {
      const deficit = this.o.target - this.free.length - this.creating - this.resetting;
      if (deficit <= refillSlack(this.o.target)) return;
      const wait = this.refillBlockedUntil - Date.now();
      if (wait > 0) {
        setTimeout(() => this.pump(), wait).unref();
        return;
      }
      n = deficit;
    }
    const slots = this.o.slots.allocate(Math.min(n, MAX_BATCH));
    if (slots.length === 0) {
      this.rejectUnserved(this.o.slots.exhaustedError());
      return;
    }
    this.o.track(this.createBatch(slots, demand > 0));
  }

  private rejectUnserved(err: unknown): void {
    let n = this.unservedWaiters();
    while (n-- > 0) this.waiters.pop()!.reject(err);
  }

  // --- creation ---------------------------------------------------------------------

  private async createBatch(slots: SlotNames[], forDemand: boolean): Promise<void> {
    this.batchRunning = true;
    this.creating += slots.length;
    let failed: Set<SlotNames>;
    let reason: string;
    try {
      ({ failed, reason } = await this.o.slots.createRoot(slots));
    } finally {
      this.batchRunning = false;
    }
    this.pump(); // demand that arrived during this batch gets the next one
    // The link filter knows a slot before anything can run behind it.
    const made = slots.filter((s) => !failed.has(s));
    if (made.length) {
      await this.o.firewall.addLinks(made).catch((e: unknown) => {
        made.forEach((s) => failed.add(s));
        reason = `link filter: ${(e as Error).message}`;
      });
    }
    const inner = slots.filter((s) => !failed.has(s)).map((s) => this.configureInside(s));
    if (failed.size > 0) await this.creationFailed([...failed], reason, forDemand);
    await Promise.all(inner);
  }

  private async configureInside(s: SlotNames): Promise<void> {
    const problem = await this.o.slots.createInside(s, this.o.mode);
    if (problem !== undefined) return this.creationFailed([s], problem, false);
    this.creating--;
    if (this.running) this.offer(this.o.slots.toSlot(s, this.o.mode));
    else await this.o.slots.remove([s.netns], new Set([s.index]));
  }

  private async creationFailed(slots: SlotNames[], reason: string, forDemand: boolean): Promise<void> {
    this.o.log?.error({ slots: slots.map((s) => s.netns), reason }, 'network slot creation failed');
    await this.o.slots.remove(
      slots.map((s) => s.netns),
      new Set(slots.map((s) => s.index)),
    );
    this.creating -= slots.length;
    if (!forDemand) this.refillBlockedUntil = Date.now() + REFILL_BACKOFF_MS;
    // Each failed slot disappoints at most one waiter, so a broken host cannot loop forever.
    const err = new CubeError('NETWORK_FAILED', `could not create network slot: ${reason || 'ip failed'}`);
    for (let i = 0; i < slots.length && this.unservedWaiters() > 0; i++) this.waiters.pop()!.reject(err);
    this.pump();
  }

  async fillToTarget(): Promise<void> {
    while (this.free.length < this.o.target) {
      const slots = this.o.slots.allocate(Math.min(this.o.target - this.free.length, MAX_BATCH));
      if (slots.length === 0) throw this.o.slots.exhaustedError();
      const before = this.free.length;
      await this.createBatch(slots, false);
      if (this.free.length === before)
        throw new CubeError('NETWORK_FAILED', `could not fill the ${this.o.mode} network pool of node tag ${this.o.tag}; see the log for ip's error`);
    }
  }

  // --- reset and retirement ---------------------------------------------------------

  /** A returned slot back to the pool after its check, or retired (a fresh one replaces it). */
  private async resetSlot(slot: NetSlot, opts: ReleaseOptions): Promise<void> {
    let problem: string | undefined;
    try {
      await this.o.firewall.dropEgress(slot.index);
      problem = await this.o.slots.check(slot, opts);
    } catch (e) {
      problem = (e as Error).message;
    }
    this.resetting--;
    if (problem === undefined && this.running) {
      this.offer(slot);
      return;
    }
    if (problem !== undefined) this.o.log?.warn({ netns: slot.netns, problem }, 'network slot retired instead of reused');
    await this.o.slots.retire([slot]);
    this.pump();
  }

  /**
   * A burst leaves target + peak-in-use slots free when they come back; once the node has been
   * quiet for TRIM_IDLE_MS the excess is retired, so idle pool size (and its memory) returns to
   * tap_init_num.
   */
  trimIdle(): void {
    if (!this.running || this.waiters.length > 0 || this.free.length <= this.o.target) return;
    if (Date.now() - this.lastAcquire < TRIM_IDLE_MS) return;
    this.o.track(this.o.slots.retire(this.free.splice(this.o.target)));
  }
}
