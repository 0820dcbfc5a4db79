// The network-agent contract: a pool of pre-created slots, each a netns with a veth pair
// whose sandbox end (eth0) was created inside the netns (never moved: moving costs 16 ms).
import type { PoolView } from '../model/node.js';
import type { EgressRules } from './egress.js';

/**
 * How a slot is made: `ns` a netns with its veth pair (a sandbox of the ns runtime runs in it);
 * `tap` the same plus a TAP device and the translation to the guest behind it (a microVM's
 * QEMU runs in it: tap.ts). Each mode has its own pool and target; they share the node's range.
 */
export type SlotMode = 'ns' | 'tap';

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
  /** TAP mode: the TAP device inside the netns, ready for QEMU. */
  tap?: string;
}

/** How a slot comes back (NetworkAgent.release). */
export interface ReleaseOptions {
  /** Every process of its sandbox has exited (a successful RuntimeDriver.destroy): no holder scan. */
  processesGone?: boolean;
}

export interface NetworkAgent {
  /**
   * Installs the nftables table, removes stale objects of this node not in `keepSlots`, fills
   * each mode's pool to its target; `keepEgress` are the own egress rules of kept sandboxes,
   * `keepTap` those of them whose slot is a TAP-mode one.
   */
  start(keepSlots?: Map<string, number>, keepEgress?: Map<string, EgressRules>, keepTap?: Set<string>): Promise<void>;
  /** A slot of that mode (default ns) for the sandbox: from its pool, or made on demand (counted) when the pool is empty. */
  acquire(sandboxID: string, mode?: SlotMode): Promise<NetSlot>;
  /** Replaces a sandbox's own egress rules on its slot (undefined: none; dropped again when the slot is released). */
  setEgress(sandboxID: string, rules: EgressRules | undefined): Promise<void>;
  /**
   * Back to the pool after reset; the pool refills in the background. `processesGone`: the
   * caller's driver destroy succeeded, so no process of the sandbox is left in the netns
   * (RuntimeDriver.destroy) and the reset skips its scan of every process on the host.
   */
  release(sandboxID: string, opts?: ReleaseOptions): Promise<void>;
  /** The slot a sandbox holds, if any. */
  slotOf(sandboxID: string): NetSlot | undefined;
  /** The levels of a mode's pool (default ns). */
  levels(mode?: SlotMode): PoolView;
  /** destroy: remove every slot and the nftables table (host as before start). */
  stop(opts: { destroy: boolean }): Promise<void>;
}
