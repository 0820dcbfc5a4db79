// The network agent's firewall: the node's nftables table (policy, link filter) and the
// sandboxes' own egress rules by slot index. It knows slots by index only, not the pool.
import { destinationElements, type EgressRules } from './egress.js';
import type { Spawner } from './iproute.js';
import { NftBatch } from './nft-batch.js';
import { linkElementsScript, linkFilterScript, policyScript, removePolicy, sandboxRulesScript, type ConnLimits, type NodePolicy } from './nft.js';

/** What the link filter knows of a slot: its host end and the address behind it. */
type SlotLink = { hostIf: string; sandboxIp: string };
import { hostNetworks } from './host-scan.js';

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

export class Firewall {
  private policy: PolicySettings;
  /** Sandboxes' own egress rules by slot index (installed as the rules of the slot's chain). */
  private readonly egress = new Map<number, EgressRules>();
  /**
   * Every change of the table goes through this one queue, committed together when they arrive
   * together: sandboxes' rule changes and whole-table replacements stay in order. The egress map
   * is updated when a change is queued, so a replacement rendered later includes it (a slot
   * script adds its chain and map entry idempotently, then flushes and refills the chain).
   */
  private readonly rules: NftBatch;

  constructor(
    private readonly sp: Spawner,
    private readonly tag: string,
    private readonly cidr: string,
    policy: PolicySettings,
  ) {
    destinationElements(policy.denyOut, 'deny_out');
    this.policy = policy;
    this.rules = new NftBatch((script) => sp.nft(script));
  }

  /** Start: the rules of kept sandboxes' slots, re-installed with the table. */
  restore(bySlot: Map<number, EgressRules>): void {
    this.egress.clear();
    for (const [index, rules] of bySlot) this.egress.set(index, rules);
  }

  /** Per-sandbox connection limits in force (a TAP slot's netns applies them when it is made or reset). */
  get connLimits(): ConnLimits {
    return this.policy.connLimits;
  }

  /** Validates and takes a new policy; `install` replaces the table with it. */
  setPolicy(policy: PolicySettings): void {
    destinationElements(policy.denyOut, 'deny_out');
    this.policy = policy;
  }

  /**
   * Replaces a slot's own egress rules. The slot's chain is flushed and refilled in one
   * transaction, so no packet sees neither.
   */
  async setEgress(index: number, rules: EgressRules | undefined): Promise<void> {
    const old = this.egress.get(index);
    if (!old && !rules) return;
    const script = sandboxRulesScript(this.tag, index, rules);
    const remember = (r: EgressRules | undefined) => (r ? this.egress.set(index, r) : this.egress.delete(index));
    remember(rules);
    try {
      await this.rules.apply(script);
    } catch (e) {
      remember(old);
      throw e;
    }
  }

  async dropEgress(index: number): Promise<void> {
    const rules = this.egress.get(index);
    if (!rules) return;
    this.egress.delete(index);
    // Left behind, they would apply to the next tenant of the slot: rebuild the table instead.
    await this.rules.apply(sandboxRulesScript(this.tag, index, undefined)).catch(() => this.install());
  }

  /** The whole table from the current policy and every sandbox's rules, replaced in one transaction. */
  async install(): Promise<void> {
    // Read when the table is made (start, policy change): one file, no process.
    const hostNets = this.policy.denyHostNetworks ? destinationElements(await hostNetworks(), 'host networks') : [];
    await this.rules.apply(() => {
      const p: NodePolicy = {
        tag: this.tag,
        cidr: this.cidr,
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

  /** The link filter knows exactly these slots (start). */
  async filterLinks(slots: readonly SlotLink[]): Promise<void> {
    await this.rules.apply(linkFilterScript(this.tag, slots));
  }

  /** The link filter learns new slots before anything can run behind them. */
  async addLinks(slots: readonly SlotLink[]): Promise<void> {
    await this.rules.apply(linkElementsScript(this.tag, slots));
  }

  /** The node's tables gone (stop with destroy). */
  async remove(): Promise<void> {
    await removePolicy(this.sp, this.tag);
  }
}
