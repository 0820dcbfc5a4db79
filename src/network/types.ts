// The network-agent contract: a pool of pre-created slots, each a netns with a veth pair
// whose sandbox end (eth0) was created inside the netns (never moved: moving costs 16 ms).
import type { PoolView } from '../api/types.js';
import type { EgressRules } from './egress.js';

export interface NetSlot {
  /** Index in the node's range: fixes names and addresses. */
  index: number;
  /** Name under /run/netns: cube-<nodeTag>-<index>. */
  netns: string;
  netnsPath: string;
  /** Host-side veth: cube<nodeTag><index> (<= 15 chars). */
  hostIf: string;
  hostIp: string;
  sandboxIp: string;
}

export interface NetworkAgent {
  /**
   * Installs the nftables table, removes stale objects of this node not in `keepSlots`, fills
   * the pool to tap_init_num; `keepEgress` are the own egress rules of kept sandboxes.
   */
  start(keepSlots?: Map<string, number>, keepEgress?: Map<string, EgressRules>): Promise<void>;
  /** A slot for the sandbox: from the pool, or made on demand (counted) when the pool is empty. */
  acquire(sandboxID: string): Promise<NetSlot>;
  /** Replaces a sandbox's own egress rules on its slot (undefined: none; dropped again when the slot is released). */
  setEgress(sandboxID: string, rules: EgressRules | undefined): Promise<void>;
  /** Back to the pool after reset; the pool refills in the background. */
  release(sandboxID: string): Promise<void>;
  /** The slot a sandbox holds, if any. */
  slotOf(sandboxID: string): NetSlot | undefined;
  levels(): PoolView;
  /** destroy: remove every slot and the nftables table (host as before start). */
  stop(opts: { destroy: boolean }): Promise<void>;
}
