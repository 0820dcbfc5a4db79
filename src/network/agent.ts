// The network-agent: a pool of pre-created slots (netns + veth pair + addresses) handed to
// sandboxes without a lock that serialises bursts. Node runs this on one thread, so taking
// a free slot is a pop; only creating slots touches the kernel, and that is batched: one
// `ip -b` for the root-netns part of a whole batch, one `ip -n X -b` per slot for the inside.
import { performance } from 'node:perf_hooks';
import { access } from 'node:fs/promises';
import type { Logger } from 'pino';
import type { PoolView } from '../api/types.js';
import { CubeError } from '../errors.js';
import type { NetSlot, NetworkAgent } from './types.js';
import { SlotAllocator, parseRange, slotAddresses, type Range, type SlotAddresses } from './ipam.js';
import { NETNS_DIR, hostIfName, netnsName } from './names.js';
import { Spawner, failedItems } from './iproute.js';
import { destinationElements, type EgressRules } from './egress.js';
import { NftBatch } from './nft-batch.js';
import { enableIpForwarding, linkElementsScript, linkFilterScript, policyScript, removePolicy, sandboxRulesScript, type ConnLimits, type NodePolicy } from './nft.js';
import { arpEntries, conntrackMentions, hostIfIndices, hostNetworks, netnsIndices } from './host-scan.js';
import { sharedHelper } from '../runtime/ns/helper.js';
import { RESET_LINES, expectedState, innerCreateLines, parseSlotState, removeLines, rootCreateLines, type SlotNames } from './slot-script.js';
import { RecentCount, WaitWindow } from './wait-stats.js';

export interface PoolNotice {
  kind: 'pool.exhausted';
  message: string;
  /** Allocations waiting when the pool ran dry. */
  waiting: number;
}

export interface NetworkAgentOptions {
  nodeTag: string;
  cidr: string;
  /** tap_init_num: free slots kept warm. */
  initNum: number;
  /** The node's policy knobs (config): live through setPolicy. */
  policy: PolicySettings;
  log?: Logger;
  onNotice?: (n: PoolNotice) => void;
}

/** The node-wide part of the network policy, as configured. */
export interface PolicySettings {
  allowHostAccess: boolean;
  /** Internet for sandboxes that do not say (allow_internet_access). */
  internetDefault: boolean;
  /** Destinations no sandbox reaches (deny_out): IPv4 addresses or CIDRs. */
  denyOut: readonly string[];
  /** The host's connected subnets and gateways are denied too (deny_host_networks). */
  denyHostNetworks: boolean;
  /** Per sandbox: tracked connections at once, and new ones per second (conntrack_max_per_sandbox, new_connections_per_sec). */
  connLimits: ConnLimits;
}

/** The policy knobs of the cubelet's network plugin config. */
export function policySettingsOf(n: {
  allow_host_access: boolean;
  allow_internet_access: boolean;
  deny_out: readonly string[];
  deny_host_networks: boolean;
  conntrack_max_per_sandbox: number;
  new_connections_per_sec: number;
}): PolicySettings {
  return {
    allowHostAccess: n.allow_host_access,
    internetDefault: n.allow_internet_access,
    denyOut: n.deny_out,
    denyHostNetworks: n.deny_host_networks,
    connLimits: { maxConnections: n.conntrack_max_per_sandbox, newPerSec: n.new_connections_per_sec },
  };
}

interface Waiter {
  sandboxID: string;
  t0: number;
  resolve: (s: NetSlot) => void;
  reject: (e: unknown) => void;
}

/** Root batches stay short so the first waiters are not held behind a long refill. */
const MAX_BATCH = 64;
/** `ip -n` spawns in flight: fork+exec is CPU-bound and this host has 2 cores. */
const INNER_CONCURRENCY = 4;
/** How long stop/start wait for the kernel's batched netns cleanup to drop the host veths. */
const LINK_GONE_TIMEOUT_MS = 5_000;
const DRAIN_POLL_MS = 250;
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
/**
 * A returned slot's netns is read back in full (one `ip -n` run: links, addresses, routes, rules,
 * and its neighbours flushed) on its first return and on every VERIFY_EVERY-th release of the
 * node (the first included). Sandboxes hold no CAP_NET_ADMIN and cannot create a user namespace to gain it
 * (seccomp), so they cannot change any of that: the sample is defence in depth, and it was the
 * largest cost of a release (an exec of `ip` and a netns switch per cycle). The host-side checks
 * (processes in the netns, the host's ARP entry, conntrack) run on every release.
 */
export const VERIFY_EVERY = 8;
/** After this long without an acquire, free slots above tap_init_num (left by a burst) are removed. */
const TRIM_IDLE_MS = 5_000;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export class NsNetworkAgent implements NetworkAgent {
  private readonly range: Range;
  private readonly tag: string;
  private readonly sp = new Spawner();
  private alloc: SlotAllocator;
  private free: NetSlot[] = [];
  private readonly inUse = new Map<string, NetSlot>();
  private readonly waiters: Waiter[] = [];
  /** A second acquire of a sandbox that is still waiting shares the first one's answer. */
  private readonly pending = new Map<string, Promise<NetSlot>>();
  /** Retired slots whose index comes back once the kernel has dropped their host veth. */
  private readonly draining = new Map<number, NetSlot>();
  private creating = 0;
  private resetting = 0;
  private onDemand = 0;
  private readonly onDemandRecent = new RecentCount();
  private readonly waits = new WaitWindow();
  private batchRunning = false;
  private pumpScheduled = false;
  private refillBlockedUntil = 0;
  private running = false;
  private dryNoticeSent = false;
  private drainTimer: NodeJS.Timeout | undefined;
  private readonly background = new Set<Promise<unknown>>();
  private innerActive = 0;
  private readonly innerQueue: (() => void)[] = [];
  private conntrackTool: boolean | undefined;
  private policy: PolicySettings;
  /** Sandboxes' own egress rules by slot index (installed as the rules of the slot's chain). */
  private readonly egress = new Map<number, EgressRules>();
  /**
   * Every change of the table goes through this one queue, committed together when they arrive
   * together: sandboxes' rule changes and whole-table replacements stay in order. The egress map
   * is updated when a change is queued, so a replacement rendered later includes it (a slot
   * script adds its chain and map entry idempotently, then flushes and refills the chain).
   */
  private readonly rules = new NftBatch((script) => this.sp.nft(script));
  private lastAcquire = 0;
  private releases = 0;
  /** eth0's MAC per slot index, read at the slot's last full verification; forgotten when the index is freed. */
  private readonly eth0Macs = new Map<number, string | undefined>();
  /** Full verifications of returned slots so far (tests, benchmarks). */
  verifications = 0;

  constructor(private readonly opts: NetworkAgentOptions) {
    if (!/^[0-9a-f]{4}$/.test(opts.nodeTag)) throw new CubeError('CONFIG_INVALID', `node tag "${opts.nodeTag}" must be 4 hex characters`);
    if (!Number.isInteger(opts.initNum) || opts.initNum < 0) throw new CubeError('CONFIG_INVALID', `tap_init_num must be a non-negative integer, got ${opts.initNum}`);
    this.tag = opts.nodeTag;
    this.range = parseRange(opts.cidr);
    if (opts.initNum > this.range.maxIndex) {
      throw new CubeError('CONFIG_INVALID', `tap_init_num ${opts.initNum} exceeds the ${this.range.maxIndex} slots of ${this.range.cidr}`);
    }
    this.alloc = new SlotAllocator(this.range);
    destinationElements(opts.policy.denyOut, 'deny_out');
    this.policy = opts.policy;
  }

  /** Process spawns so far (ip, nft, conntrack): the cost that bounds burst throughput. */
  get spawns(): number {
    return this.sp.spawns;
  }

  /**
   * `keepSlots`: sandboxes that outlived the daemon, with their slot index; `keepEgress`: the
   * egress rules those of them had (re-installed with the table, which start replaces).
   */
  async start(keepSlots: Map<string, number> = new Map(), keepEgress: Map<string, EgressRules> = new Map()): Promise<void> {
    if (this.running) throw new CubeError('CONFLICT', 'network agent already started');
    this.alloc = new SlotAllocator(this.range);
    this.free = [];
    this.inUse.clear();
    this.draining.clear();
    this.egress.clear();
    this.refillBlockedUntil = 0;
    if (await enableIpForwarding()) this.opts.log?.info('turned on net.ipv4.ip_forward: sandbox connections are routed (NAT) through the host');
    await this.adoptAndSweep(keepSlots);
    for (const [sandboxID, rules] of keepEgress) {
      const slot = this.inUse.get(sandboxID);
      if (slot) this.egress.set(slot.index, rules);
    }
    await this.installTable();
    await this.rules.apply(linkFilterScript(this.tag, [...this.inUse.values()]));
    this.running = true;
    this.drainTimer = setInterval(() => void this.pollDraining(), DRAIN_POLL_MS);
    this.drainTimer.unref();
    await this.fillToTarget();
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
      const message = `network pool of node tag ${this.tag} ran dry (target ${this.opts.initNum}, ${this.inUse.size} in use): creating slots on demand`;
      this.opts.log?.warn({ waiting: this.waiters.length }, message);
      this.opts.onNotice?.({ kind: 'pool.exhausted', message, waiting: this.waiters.length });
    }
    this.pump();
    return p;
  }

  async release(sandboxID: string): Promise<void> {
    const slot = this.inUse.get(sandboxID);
    if (!slot) return;
    this.inUse.delete(sandboxID);
    this.resetting++;
    this.track(this.reset(slot));
  }

  slotOf(sandboxID: string): NetSlot | undefined {
    return this.inUse.get(sandboxID);
  }

  levels(): PoolView {
    return {
      free: this.free.length,
      inUse: this.inUse.size,
      creating: this.creating,
      total: this.free.length + this.inUse.size + this.creating + this.resetting,
      target: this.opts.initNum,
      inFlight: this.waiters.length,
      onDemand: this.onDemand,
      onDemandRecent: this.onDemandRecent.count(),
      ...this.waits.summary(),
    };
  }

  /** Resolves when no creation, reset or retirement is in progress (tests, benchmarks, stop). */
  async settled(): Promise<void> {
    for (;;) {
      if (this.pumpScheduled) await new Promise((r) => setImmediate(r));
      else if (this.background.size > 0) await Promise.allSettled([...this.background]);
      else return;
    }
  }

  /** Live change of the node's policy (config allow_host_access, allow_internet_access, deny_out). */
  async setPolicy(policy: PolicySettings): Promise<void> {
    destinationElements(policy.denyOut, 'deny_out');
    this.policy = policy;
    if (this.running) await this.installTable();
  }

  /**
   * Replaces a sandbox's own egress rules on the slot it holds (at create: before anything
   * runs in it). The slot's chain is flushed and refilled in one transaction, so no packet sees neither.
   */
  async setEgress(sandboxID: string, rules: EgressRules | undefined): Promise<void> {
    const slot = this.inUse.get(sandboxID);
    if (!slot) throw new CubeError('NETWORK_FAILED', `sandbox ${sandboxID} holds no network slot`);
    const old = this.egress.get(slot.index);
    if (!old && !rules) return;
    const script = sandboxRulesScript(this.tag, slot.index, rules);
    const remember = (r: EgressRules | undefined) => (r ? this.egress.set(slot.index, r) : this.egress.delete(slot.index));
    remember(rules);
    try {
      await this.rules.apply(script);
    } catch (e) {
      remember(old);
      throw e;
    }
  }

  private async dropEgress(slot: NetSlot): Promise<void> {
    const rules = this.egress.get(slot.index);
    if (!rules) return;
    this.egress.delete(slot.index);
    // Left behind, they would apply to the next tenant of the slot: rebuild the table instead.
    await this.rules.apply(sandboxRulesScript(this.tag, slot.index, undefined)).catch(() => this.installTable());
  }

  /** The whole table from the current policy and every sandbox's rules, replaced in one transaction. */
  private async installTable(): Promise<void> {
    // Read when the table is made (start, policy change): one file, no process.
    const hostNets = this.policy.denyHostNetworks ? destinationElements(await hostNetworks(), 'host networks') : [];
    await this.rules.apply(() => {
      const p: NodePolicy = {
        tag: this.tag,
        cidr: this.range.cidr,
        allowHostAccess: this.policy.allowHostAccess,
        internetDefault: this.policy.internetDefault,
        denyOut: destinationElements(this.policy.denyOut, 'deny_out'),
        hostNets,
        connLimits: this.policy.connLimits,
        sandboxes: new Map(this.egress),
      };
      return policyScript(p);
    });
  }

  async stop(opts: { destroy: boolean }): Promise<void> {
    this.running = false;
    clearInterval(this.drainTimer);
    for (const w of this.waiters.splice(0)) w.reject(new CubeError('NETWORK_FAILED', 'network agent is stopping'));
    await this.settled();
    if (opts.destroy) {
      const names = new Set([...(await netnsIndices(this.tag))].map((i) => netnsName(this.tag, i)));
      await this.removeSlots([...names], new Set(await hostIfIndices(this.tag)));
      await removePolicy(this.sp, this.tag);
      this.inUse.clear();
    } else {
      // In-use slots and the policy stay: their sandboxes outlive the daemon and are re-adopted.
      await this.removeSlots(this.free.map((s) => s.netns), new Set(this.free.map((s) => s.index)));
    }
    this.free = [];
    this.draining.clear();
  }

  // --- allocation -------------------------------------------------------------------

  private assign(sandboxID: string, slot: NetSlot, t0: number): void {
    this.inUse.set(sandboxID, slot);
    this.waits.record(performance.now() - t0);
  }

  /** A ready slot goes to the oldest waiter, else to the free list. */
  private offer(slot: NetSlot): void {
    const w = this.waiters.shift();
    if (w) {
      this.assign(w.sandboxID, slot, w.t0);
      w.resolve(slot);
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
  private pump(): void {
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
      const deficit = this.opts.initNum - this.free.length - this.creating - this.resetting;
      if (deficit <= refillSlack(this.opts.initNum)) return;
      const wait = this.refillBlockedUntil - Date.now();
      if (wait > 0) {
        setTimeout(() => this.pump(), wait).unref();
        return;
      }
      n = deficit;
    }
    const slots = this.allocate(Math.min(n, MAX_BATCH));
    if (slots.length === 0) {
      this.rejectUnserved(this.alloc.exhaustedError());
      return;
    }
    this.track(this.createBatch(slots, demand > 0));
  }

  private allocate(n: number): SlotNames[] {
    const out: SlotNames[] = [];
    for (let i = 0; i < n && this.alloc.used < this.alloc.capacity; i++) out.push(this.names(this.alloc.allocate()));
    return out;
  }

  private rejectUnserved(err: unknown): void {
    let n = this.unservedWaiters();
    while (n-- > 0) this.waiters.pop()!.reject(err);
  }

  private names(a: SlotAddresses): SlotNames {
    return { ...a, netns: netnsName(this.tag, a.index), hostIf: hostIfName(this.tag, a.index) };
  }

  private toSlot(s: SlotNames): NetSlot {
    return { index: s.index, netns: s.netns, netnsPath: `${NETNS_DIR}/${s.netns}`, hostIf: s.hostIf, hostIp: s.hostIp, sandboxIp: s.sandboxIp };
  }

  // --- creation ---------------------------------------------------------------------

  private async createBatch(slots: SlotNames[], forDemand: boolean): Promise<void> {
    this.batchRunning = true;
    this.creating += slots.length;
    let failed: Set<SlotNames>;
    let reason = '';
    try {
      const r = await this.sp.ipBatch(slots.flatMap(rootCreateLines));
      failed = failedItems(slots, slots.map((s) => rootCreateLines(s).length), r.failedLines);
      reason = r.stderr.trim();
    } catch (e) {
      failed = new Set(slots);
      reason = (e as Error).message;
    } finally {
      this.batchRunning = false;
    }
    this.pump(); // demand that arrived during this batch gets the next one
    // The link filter knows a slot before anything can run behind it.
    const made = slots.filter((s) => !failed.has(s));
    if (made.length) {
      await this.rules.apply(linkElementsScript(this.tag, made)).catch((e: unknown) => {
        made.forEach((s) => failed.add(s));
        reason = `link filter: ${(e as Error).message}`;
      });
    }
    const inner = slots.filter((s) => !failed.has(s)).map((s) => this.configureInside(s));
    if (failed.size > 0) await this.creationFailed([...failed], reason, forDemand);
    await Promise.all(inner);
  }

  private async configureInside(s: SlotNames): Promise<void> {
    await this.innerSlot();
    let r;
    try {
      r = await this.sp.ipBatch(innerCreateLines(s), { netns: s.netns });
    } finally {
      this.innerDone();
    }
    if (r.failedLines.size > 0) return this.creationFailed([s], r.stderr.trim(), false);
    this.creating--;
    if (this.running) this.offer(this.toSlot(s));
    else await this.removeSlots([s.netns], new Set([s.index]));
  }

  private async creationFailed(slots: SlotNames[], reason: string, forDemand: boolean): Promise<void> {
    this.opts.log?.error({ slots: slots.map((s) => s.netns), reason }, 'network slot creation failed');
    await this.removeSlots(
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

  private async fillToTarget(): Promise<void> {
    while (this.free.length < this.opts.initNum) {
      const slots = this.allocate(Math.min(this.opts.initNum - this.free.length, MAX_BATCH));
      if (slots.length === 0) throw this.alloc.exhaustedError();
      const before = this.free.length;
      await this.createBatch(slots, false);
      if (this.free.length === before) throw new CubeError('NETWORK_FAILED', `could not fill the network pool of node tag ${this.tag}; see the log for ip's error`);
    }
  }

  private innerSlot(): Promise<void> {
    if (this.innerActive < INNER_CONCURRENCY) {
      this.innerActive++;
      return Promise.resolve();
    }
    return new Promise((r) => this.innerQueue.push(r));
  }

  private innerDone(): void {
    const next = this.innerQueue.shift();
    if (next) next();
    else this.innerActive--;
  }

  // --- reset and retirement ---------------------------------------------------------

  /**
   * Nothing of the old tenant may survive: no process in the netns, no learned neighbour,
   * no connection tracked on the host, and links, addresses, routes and rules exactly as
   * created. Anything else retires the slot (a fresh one replaces it).
   */
  private async reset(slot: NetSlot): Promise<void> {
    let problem: string | undefined;
    try {
      await this.dropEgress(slot);
      const holders = await sharedHelper().netnsHolders(slot.netnsPath);
      if (holders.length > 0) {
        problem = `processes still in the netns: ${holders.join(' ')}`;
      } else if (this.releases++ % VERIFY_EVERY === 0 || !this.eth0Macs.has(slot.index)) {
        this.verifications++;
        const r = await this.sp.ipBatch(RESET_LINES, { netns: slot.netns, json: true, ipv4: true });
        const state = r.failedLines.size > 0 ? undefined : parseSlotState(r.stdout);
        if (!state) problem = `reset failed: ${r.stderr.trim()}`;
        else if (state.fingerprint !== expectedState(slot)) problem = 'links, addresses, routes or rules changed by the sandbox';
        else {
          this.eth0Macs.set(slot.index, state.eth0Mac);
          await this.forgetOnHost(slot, state.eth0Mac);
        }
      } else {
        await this.forgetOnHost(slot, this.eth0Macs.get(slot.index));
      }
    } catch (e) {
      problem = (e as Error).message;
    }
    this.resetting--;
    if (problem === undefined && this.running) {
      this.offer(slot);
      return;
    }
    if (problem !== undefined) this.opts.log?.warn({ netns: slot.netns, problem }, 'network slot retired instead of reused');
    await this.retire(slot);
    this.pump();
  }

  private async forgetOnHost(slot: NetSlot, eth0Mac: string | undefined): Promise<void> {
    const mac = (await arpEntries(slot.hostIf)).get(slot.sandboxIp);
    if (mac !== undefined && mac !== eth0Mac && mac !== '00:00:00:00:00:00') {
      await this.sp.ipBatch([`neigh flush dev ${slot.hostIf}`]);
    }
    if (await conntrackMentions(slot.sandboxIp)) {
      this.conntrackTool ??= await access('/usr/sbin/conntrack').then(() => true, () => false);
      if (this.conntrackTool) {
        // -D exits 1 when nothing matched: that is fine.
        await this.sp.run('conntrack', ['-D', '-s', slot.sandboxIp]);
        await this.sp.run('conntrack', ['-D', '-d', slot.sandboxIp]);
      } else {
        this.opts.log?.warn({ ip: slot.sandboxIp }, 'conntrack entries of a returned slot remain: install the conntrack tool');
      }
    }
  }

  private async retire(slot: NetSlot): Promise<void> {
    this.draining.set(slot.index, slot);
    await this.sp.ipBatch(removeLines([slot.netns]));
  }

  /**
   * A burst leaves target + peak-in-use slots free when they come back; once the node has been
   * quiet for TRIM_IDLE_MS the excess is retired, so idle pool size (and its memory) returns to
   * tap_init_num.
   */
  private trimIdle(): void {
    if (!this.running || this.waiters.length > 0 || this.free.length <= this.opts.initNum) return;
    if (Date.now() - this.lastAcquire < TRIM_IDLE_MS) return;
    const excess = this.free.splice(this.opts.initNum);
    for (const s of excess) this.draining.set(s.index, s);
    this.track(this.sp.ipBatch(removeLines(excess.map((s) => s.netns))));
  }

  /** Gives back the indices of retired slots once the kernel has dropped their host veth. */
  private async pollDraining(): Promise<void> {
    this.trimIdle();
    if (this.draining.size === 0) return;
    const links = await hostIfIndices(this.tag);
    const ns = await netnsIndices(this.tag);
    for (const i of [...this.draining.keys()]) {
      if (!links.has(i) && !ns.has(i)) {
        this.draining.delete(i);
        this.freeIndex(i);
      }
    }
    this.pump();
  }

  // --- start-up and tear-down -------------------------------------------------------

  /** Re-adopts kept slots, removes everything else of this tag left by a crash. */
  private async adoptAndSweep(keep: Map<string, number>): Promise<void> {
    const ns = await netnsIndices(this.tag);
    const links = await hostIfIndices(this.tag);
    const kept = new Set<number>();
    for (const [sandboxID, index] of keep) {
      if (!ns.has(index) || index > this.range.maxIndex || index < 1) {
        this.opts.log?.warn({ sandboxID, index }, 'kept network slot is gone or outside the range: not re-adopted');
        continue;
      }
      const s = this.toSlot(this.names(slotAddresses(this.range, index)));
      this.alloc.claim(index);
      this.inUse.set(sandboxID, s);
      kept.add(index);
    }
    const staleNs = [...ns].filter((i) => !kept.has(i));
    const staleLinks = new Set([...links, ...staleNs].filter((i) => !kept.has(i)));
    if (staleLinks.size > 0) this.opts.log?.info({ netns: staleNs.length, links: staleLinks.size }, 'removing stale network slots');
    const survivors = await this.removeSlots(staleNs.map((i) => netnsName(this.tag, i)), staleLinks);
    // A veth held by a still-running process keeps its index busy until it goes.
    for (const i of survivors) {
      this.alloc.claim(i);
      this.draining.set(i, this.toSlot(this.names(slotAddresses(this.range, i))));
    }
  }

  /**
   * Deletes the netns (their veths go with them in the kernel's batched cleanup), waits for
   * the host ends to vanish, and deletes any that did not. Returns the indices still present.
   */
  private async removeSlots(netns: string[], indices: Set<number>): Promise<number[]> {
    if (netns.length > 0) await this.sp.ipBatch(removeLines(netns));
    const deadline = Date.now() + LINK_GONE_TIMEOUT_MS;
    let left = [...(await hostIfIndices(this.tag))].filter((i) => indices.has(i));
    while (left.length > 0 && Date.now() < deadline) {
      await sleep(20);
      left = [...(await hostIfIndices(this.tag))].filter((i) => indices.has(i));
    }
    if (left.length > 0) {
      await this.sp.ipBatch(left.map((i) => `link del ${hostIfName(this.tag, i)}`));
      left = [...(await hostIfIndices(this.tag))].filter((i) => indices.has(i));
    }
    for (const i of indices) if (!left.includes(i) && this.alloc.isTaken(i) && !this.isHeld(i)) this.freeIndex(i);
    return left;
  }

  /** The index can be given to a new slot, whose new veth has a new MAC. */
  private freeIndex(i: number): void {
    this.eth0Macs.delete(i);
    this.alloc.free(i);
  }

  private isHeld(index: number): boolean {
    for (const s of this.inUse.values()) if (s.index === index) return true;
    return false;
  }

  private track(p: Promise<unknown>): void {
    const t = p.catch((e) => this.opts.log?.error({ err: e }, 'network agent background task failed'));
    this.background.add(t);
    void t.finally(() => this.background.delete(t));
  }
}
