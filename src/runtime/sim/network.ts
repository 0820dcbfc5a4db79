// The network side of the SIMULATION runtime: addresses from the node's range (the same IPAM
// as the real network-agent) and no kernel object at all: no netns, veth or nftables table.
// Every slot of the range counts as a free pooled slot, so a sim node's pool never runs dry
// before its range does.
import { CubeError } from '../../errors.js';
import type { PoolView } from '../../model/node.js';
import { parseRange, SlotAllocator, slotAddresses } from '../../network/ipam.js';
import type { NetSlot, NetworkAgent } from '../../network/types.js';

export class SimNetworkAgent implements NetworkAgent {
  private readonly alloc: SlotAllocator;
  private readonly slots = new Map<string, NetSlot>();

  constructor(private readonly o: { nodeTag: string; cidr: string }) {
    this.alloc = new SlotAllocator(parseRange(o.cidr));
  }

  private slot(index: number, hostIp: string, sandboxIp: string): NetSlot {
    return { index, netns: `sim-${this.o.nodeTag}-${index}`, netnsPath: '', hostIf: `sim${this.o.nodeTag}${index}`, hostIp, sandboxIp };
  }

  async start(keepSlots: Map<string, number> = new Map()): Promise<void> {
    for (const [sandboxID, index] of keepSlots) {
      this.alloc.claim(index);
      const a = slotAddresses(this.alloc.range, index);
      this.slots.set(sandboxID, this.slot(index, a.hostIp, a.sandboxIp));
    }
  }

  async acquire(sandboxID: string): Promise<NetSlot> {
    if (this.slots.has(sandboxID)) throw new CubeError('CONFLICT', `sandbox ${sandboxID} already holds a slot`);
    const a = this.alloc.allocate();
    const s = this.slot(a.index, a.hostIp, a.sandboxIp);
    this.slots.set(sandboxID, s);
    return s;
  }

  /** A simulated sandbox has no network to filter: the rules are only checked to belong to a slot. */
  async setEgress(sandboxID: string, _rules?: unknown): Promise<void> {
    if (!this.slots.has(sandboxID)) throw new CubeError('NETWORK_FAILED', `sandbox ${sandboxID} holds no network slot`);
  }

  async release(sandboxID: string): Promise<void> {
    const s = this.slots.get(sandboxID);
    if (!s) return;
    this.slots.delete(sandboxID);
    this.alloc.free(s.index);
  }

  slotOf(sandboxID: string): NetSlot | undefined {
    return this.slots.get(sandboxID);
  }

  levels(): PoolView {
    const cap = this.alloc.capacity;
    return {
      free: cap - this.alloc.used,
      inUse: this.alloc.used,
      creating: 0,
      total: cap,
      target: cap,
      inFlight: 0,
      onDemand: 0,
      waitP50Ms: 0,
      waitP99Ms: 0,
      recentWaitsMs: [],
    };
  }

  async stop(): Promise<void> {
    this.slots.clear();
  }
}
