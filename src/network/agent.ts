// The network-agent: the node's network slots (netns + veth pair + addresses) handed to
// sandboxes from a warm pool. One-way by job: the agent wires the pool (pool.ts: free slots,
// waiters, refills), the slots as kernel objects (slot.ts: create, check, remove) and the
// firewall (firewall.ts: the node's nftables table and sandboxes' own rules).
import type { Logger } from 'pino';
import type { PoolView } from '../api/types.js';
import { CubeError } from '../errors.js';
import type { NetSlot, NetworkAgent } from './types.js';
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
  /** tap_init_num: free slots kept warm. */
  initNum: number;
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
  private readonly pool: SlotPool;
  private running = false;
  private drainTimer: NodeJS.Timeout | undefined;
  private readonly background = new Set<Promise<unknown>>();

  constructor(private readonly opts: NetworkAgentOptions) {
    if (!/^[0-9a-f]{4}$/.test(opts.nodeTag)) throw new CubeError('CONFIG_INVALID', `node tag "${opts.nodeTag}" must be 4 hex characters`);
    if (!Number.isInteger(opts.initNum) || opts.initNum < 0) throw new CubeError('CONFIG_INVALID', `tap_init_num must be a non-negative integer, got ${opts.initNum}`);
    this.tag = opts.nodeTag;
    const range = parseRange(opts.cidr);
    if (opts.initNum > range.maxIndex) {
      throw new CubeError('CONFIG_INVALID', `tap_init_num ${opts.initNum} exceeds the ${range.maxIndex} slots of ${range.cidr}`);
    }
    this.slots = new Slots(this.sp, this.tag, range, (i) => this.pool.holds(i), opts.log);
    this.firewall = new Firewall(this.sp, this.tag, range.cidr, opts.policy);
    const track = (p: Promise<unknown>) => this.track(p);
    this.pool = new SlotPool({ tag: this.tag, target: opts.initNum, slots: this.slots, firewall: this.firewall, track, ...(opts.log ? { log: opts.log } : {}), ...(opts.onNotice ? { onNotice: opts.onNotice } : {}) });
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
   * egress rules those of them had (re-installed with the table, which start replaces).
   */
  async start(keepSlots: Map<string, number> = new Map(), keepEgress: Map<string, EgressRules> = new Map()): Promise<void> {
    if (this.running) throw new CubeError('CONFLICT', 'network agent already started');
    this.slots.clear();
    this.pool.reset(new Map());
    if (await enableIpForwarding()) this.opts.log?.info('turned on net.ipv4.ip_forward: sandbox connections are routed (NAT) through the host');
    const adopted = await this.slots.adoptAndSweep(keepSlots);
    this.pool.reset(adopted);
    const rules = new Map<number, EgressRules>();
    for (const [sandboxID, r] of keepEgress) {
      const slot = adopted.get(sandboxID);
      if (slot) rules.set(slot.index, r);
    }
    this.firewall.restore(rules);
    await this.firewall.install();
    await this.firewall.filterLinks(this.pool.held());
    this.running = true;
    this.pool.open();
    this.drainTimer = setInterval(() => void this.pollDraining(), DRAIN_POLL_MS);
    this.drainTimer.unref();
    await this.pool.fillToTarget();
  }

  async acquire(sandboxID: string): Promise<NetSlot> {
    return this.pool.acquire(sandboxID);
  }

  async release(sandboxID: string): Promise<void> {
    this.pool.release(sandboxID);
  }

  slotOf(sandboxID: string): NetSlot | undefined {
    return this.pool.slotOf(sandboxID);
  }

  levels(): PoolView {
    return this.pool.levels();
  }

  /** Resolves when no creation, reset or retirement is in progress (tests, benchmarks, stop). */
  async settled(): Promise<void> {
    for (;;) {
      if (this.pool.pumpScheduled) await new Promise((r) => setImmediate(r));
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
    const slot = this.pool.slotOf(sandboxID);
    if (!slot) throw new CubeError('NETWORK_FAILED', `sandbox ${sandboxID} holds no network slot`);
    await this.firewall.setEgress(slot.index, rules);
  }

  async stop(opts: { destroy: boolean }): Promise<void> {
    this.running = false;
    clearInterval(this.drainTimer);
    this.pool.close();
    await this.settled();
    if (opts.destroy) {
      await this.slots.removeAll();
      await this.firewall.remove();
      this.pool.takeFree(true);
    } else {
      // In-use slots and the policy stay: their sandboxes outlive the daemon and are re-adopted.
      const free = this.pool.takeFree(false);
      await this.slots.remove(
        free.map((s) => s.netns),
        new Set(free.map((s) => s.index)),
      );
    }
    this.slots.clear();
  }

  private async pollDraining(): Promise<void> {
    this.pool.trimIdle();
    if (await this.slots.pollDraining()) this.pool.pump();
  }

  private track(p: Promise<unknown>): void {
    const t = p.catch((e) => this.opts.log?.error({ err: e }, 'network agent background task failed'));
    this.background.add(t);
    void t.finally(() => this.background.delete(t));
  }
}
