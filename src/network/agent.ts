// The network-agent: the node's network slots (netns + veth pair + addresses) handed to
// sandboxes from a warm pool per mode (ns; tap: with a TAP ready for a microVM, tap.ts). One-way
// by job: the agent wires the pools (pool.ts: free slots, waiters, refills), the slots as kernel
// objects (slot.ts: create, check, remove) and the firewall (firewall.ts: the node's nftables
// table and sandboxes' own rules).
import type { Logger } from 'pino';
import { CubeError } from '../errors.js';
import { isNodeTag } from '../ids.js';
import type { PoolView } from '../model/node.js';
import type { NetSlot, NetworkAgent, ReleaseOptions, SlotMode } from './types.js';
import { parseRange } from './ipam.js';
import { Spawner } from './iproute.js';
import type { EgressRules } from './egress.js';
import { enableIpForwarding } from './nft.js';
import { Firewall, type PolicySettings } from './firewall.js';
import { Slots } from './slot.js';
import { SlotPool, type PoolNotice } from './pool.js';

export interface NetworkAgentOptions {
  nodeTag: string;
  cidr: string;
  /** tap_init_num: free ns-mode slots kept warm. */
  initNum: number;
  /** microvm_tap_init_num: free TAP-mode slots kept warm (default 0: made on demand). */
  tapInitNum?: number;
  /** The node's policy knobs (config): live through setPolicy. */
  policy: PolicySettings;
  log?: Logger;
  onNotice?: (n: PoolNotice) => void;
}

const DRAIN_POLL_MS = 250;

export class NsNetworkAgent implements NetworkAgent {
  private readonly tag: string;
  private readonly sp = new Spawner();
  private readonly slots: Slots;
  private readonly firewall: Firewall;
  private readonly pools: Record<SlotMode, SlotPool>;
  private running = false;
  private drainTimer: NodeJS.Timeout | undefined;
  private readonly background = new Set<Promise<unknown>>();

  constructor(private readonly opts: NetworkAgentOptions) {
    if (!isNodeTag(opts.nodeTag)) throw new CubeError('CONFIG_INVALID', `node tag "${opts.nodeTag}" is not a node tag (src/ids.ts)`);
    const tapInitNum = opts.tapInitNum ?? 0;
    for (const [key, n] of [
      ['tap_init_num', opts.initNum],
      ['microvm_tap_init_num', tapInitNum],
    ] as const) {
      if (!Number.isInteger(n) || n < 0) throw new CubeError('CONFIG_INVALID', `${key} must be a non-negative integer, got ${n}`);
    }
    this.tag = opts.nodeTag;
    const range = parseRange(opts.cidr);
    if (opts.initNum + tapInitNum > range.maxIndex) {
      throw new CubeError(
        'CONFIG_INVALID',
        `tap_init_num ${opts.initNum} + microvm_tap_init_num ${tapInitNum} exceed the ${range.maxIndex} slots of ${range.cidr}`,
      );
    }
    this.firewall = new Firewall(this.sp, this.tag, range.cidr, opts.policy);
    this.slots = new Slots(
      this.sp,
      this.tag,
      range,
      (i) => this.all().some((p) => p.holds(i)),
      () => this.firewall.connLimits,
      opts.log,
    );
    const pool = (mode: SlotMode, target: number) =>
      new SlotPool({
        tag: this.tag,
        mode,
        target,
        slots: this.slots,
        firewall: this.firewall,
        track: (p) => this.track(p),
        ...(opts.log ? { log: opts.log } : {}),
        ...(opts.onNotice ? { onNotice: opts.onNotice } : {}),
      });
    this.pools = { ns: pool('ns', opts.initNum), tap: pool('tap', tapInitNum) };
  }

  private all(): SlotPool[] {
    return [this.pools.ns, this.pools.tap];
  }

  private holder(sandboxID: string): SlotPool | undefined {
    return this.all().find((p) => p.slotOf(sandboxID) !== undefined);
  }

  /** Process spawns so far (ip, nft, conntrack): the cost that bounds burst throughput. */
  get spawns(): number {
    return this.sp.spawns;
  }

  /** Full verifications of returned slots so far (tests, benchmarks). */
  get verifications(): number {
    return this.slots.verifications;
  }

  /**
   * `keepSlots`: sandboxes that outlived the daemon, with their slot index; `keepEgress`: the
   * egress rules those of them had (re-installed with the table, which start replaces);
   * `keepTap`: those of them whose slot is a TAP-mode one.
   */
  async start(keepSlots: Map<string, number> = new Map(), keepEgress: Map<string, EgressRules> = new Map(), keepTap: Set<string> = new Set()): Promise<void> {
    if (this.running) throw new CubeError('CONFLICT', 'network agent already started');
    this.slots.clear();
    for (const p of this.all()) p.reset(new Map());
    if (await enableIpForwarding()) this.opts.log?.info('turned on net.ipv4.ip_forward: sandbox connections are routed (NAT) through the host');
    const adopted = await this.slots.adoptAndSweep(keepSlots, keepTap);
    const ofMode = (tap: boolean) => new Map([...adopted].filter(([, s]) => (s.tap !== undefined) === tap));
    this.pools.ns.reset(ofMode(false));
    this.pools.tap.reset(ofMode(true));
    const rules = new Map<number, EgressRules>();
    for (const [sandboxID, r] of keepEgress) {
      const slot = adopted.get(sandboxID);
      if (slot) rules.set(slot.index, r);
    }
    this.firewall.restore(rules);
    await this.firewall.install();
    await this.firewall.filterLinks(this.all().flatMap((p) => p.held()));
    this.running = true;
    for (const p of this.all()) p.open();
    this.drainTimer = setInterval(() => void this.pollDraining(), DRAIN_POLL_MS);
    this.drainTimer.unref();
    // One after the other: they share the range and the inner-creation limit.
    for (const p of this.all()) await p.fillToTarget();
  }

  /** A sandbox holding a slot of one mode keeps it: asking for the other mode is a conflict. */
  async acquire(sandboxID: string, mode: SlotMode = 'ns'): Promise<NetSlot> {
    const other = this.pools[mode === 'ns' ? 'tap' : 'ns'];
    if (other.serves(sandboxID)) throw new CubeError('CONFLICT', `sandbox ${sandboxID} already holds a network slot of another mode than ${mode}`);
    return this.pools[mode].acquire(sandboxID);
  }

  async release(sandboxID: string, opts: ReleaseOptions = {}): Promise<void> {
    for (const p of this.all()) if (p.release(sandboxID, opts)) return;
  }

  slotOf(sandboxID: string): NetSlot | undefined {
    return this.holder(sandboxID)?.slotOf(sandboxID);
  }

  levels(mode: SlotMode = 'ns'): PoolView {
    return this.pools[mode].levels();
  }

  /** Resolves when no creation, reset or retirement is in progress (tests, benchmarks, stop). */
  async settled(): Promise<void> {
    for (;;) {
      if (this.all().some((p) => p.pumpScheduled)) await new Promise((r) => setImmediate(r));
      else if (this.background.size > 0) await Promise.allSettled([...this.background]);
      else return;
    }
  }

  /** Live change of the node's policy (config allow_host_access, allow_internet_access, deny_out). */
  async setPolicy(policy: PolicySettings): Promise<void> {
    this.firewall.setPolicy(policy);
    if (this.running) await this.firewall.install();
  }

  /**
   * Replaces a sandbox's own egress rules on the slot it holds (at create: before anything
   * runs in it).
   */
  async setEgress(sandboxID: string, rules: EgressRules | undefined): Promise<void> {
    const slot = this.slotOf(sandboxID);
    if (!slot) throw new CubeError('NETWORK_FAILED', `sandbox ${sandboxID} holds no network slot`);
    await this.firewall.setEgress(slot.index, rules);
  }

  async stop(opts: { destroy: boolean }): Promise<void> {
    this.running = false;
    clearInterval(this.drainTimer);
    for (const p of this.all()) p.close();
    await this.settled();
    if (opts.destroy) {
      await this.slots.removeAll();
      await this.firewall.remove();
      for (const p of this.all()) p.takeFree(true);
    } else {
      // In-use slots and the policy stay: their sandboxes outlive the daemon and are re-adopted.
      const free = this.all().flatMap((p) => p.takeFree(false));
      await this.slots.remove(
        free.map((s) => s.netns),
        new Set(free.map((s) => s.index)),
      );
    }
    this.slots.clear();
  }

  private async pollDraining(): Promise<void> {
    for (const p of this.all()) p.trimIdle();
    if (await this.slots.pollDraining()) for (const p of this.all()) p.pump();
  }

  private track(p: Promise<unknown>): void {
    const t = p.catch((e) => this.opts.log?.error({ err: e }, 'network agent background task failed'));
    this.background.add(t);
    void t.finally(() => this.background.delete(t));
  }
}
