// The node's network slots as kernel objects: their indices in the node's range, how a batch
// of them is made (one `ip -b` for the root-netns part of a whole batch, one `ip -n X -b` per
// slot for the inside), how a returned one is checked, and how they are removed. It knows no
// pool: which slot is free or whose is the pool's (pool.ts).
import { access } from 'node:fs/promises';
import type { Logger } from 'pino';
import type { ConnLimits } from './nft.js';
import type { NetSlot, ReleaseOptions, SlotMode } from './types.js';
import { SlotAllocator, slotAddresses, type Range, type SlotAddresses } from './ipam.js';
import { NETNS_DIR, hostIfName, netnsName } from './names.js';
import { failedItems, type Spawner } from './iproute.js';
import { arpEntries, conntrackMentions, hostIfIndices, netnsIndices } from './host-scan.js';
import { sharedHelper } from '../runtime/ns/helper.js';
import { TAP_NAME, tapExpectedState, tapSetupScript } from './tap.js';
import { RESET_LINES, expectedState, innerCreateLines, parseSlotState, removeLines, rootCreateLines, type SlotNames } from './slot-script.js';

/** `ip -n` spawns in flight: fork+exec is CPU-bound and this host has 2 cores. */
const INNER_CONCURRENCY = 4;
/** How long stop/start wait for the kernel's batched netns cleanup to drop the host veths. */
const LINK_GONE_TIMEOUT_MS = 5_000;
/**
 * A returned slot's netns is read back in full (one `ip -n` run: links, addresses, routes, rules,
 * and its neighbours flushed) on its first return and on every VERIFY_EVERY-th release of the
 * node (the first included). Sandboxes hold no CAP_NET_ADMIN and cannot create a user namespace to gain it
 * (seccomp), so they cannot change any of that: the sample is defence in depth, and it was the
 * largest cost of a release (an exec of `ip` and a netns switch per cycle). The host-side checks
 * (processes in the netns, the host's ARP entry, conntrack) run on every release.
 */
export const VERIFY_EVERY = 8;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export class Slots {
  private alloc: SlotAllocator;
  /** Retired slots' indices, given back once the kernel has dropped their host veth. */
  private readonly draining = new Set<number>();
  private innerActive = 0;
  private readonly innerQueue: (() => void)[] = [];
  private conntrackTool: boolean | undefined;
  private releases = 0;
  /** eth0's MAC per slot index, read at the slot's last full verification; forgotten when the index is freed. */
  private readonly eth0Macs = new Map<number, string | undefined>();
  /** Full verifications of returned slots so far (tests, benchmarks). */
  verifications = 0;

  constructor(
    private readonly sp: Spawner,
    private readonly tag: string,
    readonly range: Range,
    /** Whether a sandbox holds the slot of this index (its index is not freed under it). */
    private readonly held: (index: number) => boolean,
    /** The node's per-sandbox connection limits now (config): a TAP slot's netns applies them to its guest. */
    private readonly connLimits: () => ConnLimits,
    private readonly log?: Logger,
  ) {
    this.alloc = new SlotAllocator(range);
  }

  /** Start: no index taken, none draining. */
  clear(): void {
    this.alloc = new SlotAllocator(this.range);
    this.draining.clear();
  }

  /** Up to n fresh slots' names: fewer when the range runs out. */
  allocate(n: number): SlotNames[] {
    const out: SlotNames[] = [];
    for (let i = 0; i < n && this.alloc.used < this.alloc.capacity; i++) out.push(this.names(this.alloc.allocate()));
    return out;
  }

  exhaustedError(): Error {
    return this.alloc.exhaustedError();
  }

  private names(a: SlotAddresses): SlotNames {
    return { ...a, netns: netnsName(this.tag, a.index), hostIf: hostIfName(this.tag, a.index) };
  }

  toSlot(s: SlotNames, mode: SlotMode): NetSlot {
    return {
      index: s.index,
      netns: s.netns,
      netnsPath: `${NETNS_DIR}/${s.netns}`,
      hostIf: s.hostIf,
      hostIp: s.hostIp,
      sandboxIp: s.sandboxIp,
      ...(mode === 'tap' ? { tap: TAP_NAME } : {}),
    };
  }

  private at(index: number, mode: SlotMode): NetSlot {
    return this.toSlot(this.names(slotAddresses(this.range, index)), mode);
  }

  // --- creation ---------------------------------------------------------------------

  /** The root-netns part of a batch in one `ip -b`: which slots failed, and ip's words. */
  async createRoot(slots: SlotNames[]): Promise<{ failed: Set<SlotNames>; reason: string }> {
    try {
      const r = await this.sp.ipBatch(slots.flatMap(rootCreateLines));
      return {
        failed: failedItems(
          slots,
          slots.map((s) => rootCreateLines(s).length),
          r.failedLines,
        ),
        reason: r.stderr.trim(),
      };
    } catch (e) {
      return { failed: new Set(slots), reason: (e as Error).message };
    }
  }

  /** The inside of one slot (and its mode's setup): undefined when made, else what failed. */
  async createInside(s: SlotNames, mode: SlotMode): Promise<string | undefined> {
    await this.innerSlot();
    try {
      const r = await this.sp.ipBatch(innerCreateLines(s), { netns: s.netns });
      if (r.failedLines.size > 0) return r.stderr.trim();
      return mode === 'tap' ? await this.setupTap(`${NETNS_DIR}/${s.netns}`) : undefined;
    } finally {
      this.innerDone();
    }
  }

  /** The TAP mode's part, made (or made again): undefined when done, else what failed. */
  private async setupTap(netnsPath: string): Promise<string | undefined> {
    const r = await this.sp.run('nsenter', [`--net=${netnsPath}`, '--', 'sh', '-c', tapSetupScript(this.connLimits())]);
    return r.exitCode === 0 ? undefined : `TAP setup failed: ${r.stderr.trim() || `exit ${r.exitCode}`}`;
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

  // --- check of a returned slot -----------------------------------------------------

  /**
   * Nothing of the old tenant may survive: no process in the netns, no learned neighbour,
   * no connection tracked on the host, and links, addresses, routes and rules exactly as
   * created. A TAP-mode slot's TAP, NAT table and conntrack table are made again first (a guest
   * reaches them through QEMU, which holds the TAP's queues and sets its offloads). Returns what
   * is wrong (the slot must be retired), or undefined. The search for processes in the netns reads
   * /proc/<pid>/ns/net of every process on the host (a fork of the helper and a stat per process:
   * 37% of the launch helper's CPU in a rollout loop, measured by perf at load 3-4 with about 200
   * processes, and growing with the node's density); skipped when the sandbox's destroy already
   * saw every process of it exit (`processesGone`: RuntimeDriver.destroy).
   */
  async check(slot: NetSlot, opts: ReleaseOptions = {}): Promise<string | undefined> {
    if (!opts.processesGone) {
      const holders = await sharedHelper().netnsHolders(slot.netnsPath);
      if (holders.length > 0) return `processes still in the netns: ${holders.join(' ')}`;
    }
    if (slot.tap) {
      const failed = await this.setupTap(slot.netnsPath);
      if (failed) return failed;
    }
    if (this.releases++ % VERIFY_EVERY === 0 || !this.eth0Macs.has(slot.index)) {
      this.verifications++;
      const r = await this.sp.ipBatch(RESET_LINES, { netns: slot.netns, json: true, ipv4: true });
      const state = r.failedLines.size > 0 ? undefined : parseSlotState(r.stdout);
      if (!state) return `reset failed: ${r.stderr.trim()}`;
      if (state.fingerprint !== expectedState(slot, slot.tap ? tapExpectedState() : undefined))
        return 'links, addresses, routes or rules changed by the sandbox';
      this.eth0Macs.set(slot.index, state.eth0Mac);
      await this.forgetOnHost(slot, state.eth0Mac);
    } else {
      await this.forgetOnHost(slot, this.eth0Macs.get(slot.index));
    }
    return undefined;
  }

  private async forgetOnHost(slot: NetSlot, eth0Mac: string | undefined): Promise<void> {
    const mac = (await arpEntries(slot.hostIf)).get(slot.sandboxIp);
    if (mac !== undefined && mac !== eth0Mac && mac !== '00:00:00:00:00:00') {
      await this.sp.ipBatch([`neigh flush dev ${slot.hostIf}`]);
    }
    if (await conntrackMentions(slot.sandboxIp)) {
      this.conntrackTool ??= await access('/usr/sbin/conntrack').then(
        () => true,
        () => false,
      );
      if (this.conntrackTool) {
        // -D exits 1 when nothing matched: that is fine.
        await this.sp.run('conntrack', ['-D', '-s', slot.sandboxIp]);
        await this.sp.run('conntrack', ['-D', '-d', slot.sandboxIp]);
      } else {
        this.log?.warn({ ip: slot.sandboxIp }, 'conntrack entries of a returned slot remain: install the conntrack tool');
      }
    }
  }

  // --- retirement and removal ---------------------------------------------------------

  /** Removes the slots' netns; their indices come back through pollDraining. */
  async retire(slots: readonly NetSlot[]): Promise<void> {
    for (const s of slots) this.draining.add(s.index);
    await this.sp.ipBatch(removeLines(slots.map((s) => s.netns)));
  }

  /** Gives back the indices of retired slots once the kernel has dropped their host veth; false when none was draining. */
  async pollDraining(): Promise<boolean> {
    if (this.draining.size === 0) return false;
    const links = await hostIfIndices(this.tag);
    const ns = await netnsIndices(this.tag);
    for (const i of [...this.draining]) {
      if (!links.has(i) && !ns.has(i)) {
        this.draining.delete(i);
        this.freeIndex(i);
      }
    }
    return true;
  }

  /**
   * Re-adopts kept slots (sandbox -> index; those in `keepTap` are TAP-mode slots), removes
   * everything else of this tag left by a crash. Returns the adopted slots.
   */
  async adoptAndSweep(keep: Map<string, number>, keepTap: Set<string>): Promise<Map<string, NetSlot>> {
    const ns = await netnsIndices(this.tag);
    const links = await hostIfIndices(this.tag);
    const adopted = new Map<string, NetSlot>();
    for (const [sandboxID, index] of keep) {
      if (!ns.has(index) || index > this.range.maxIndex || index < 1) {
        this.log?.warn({ sandboxID, index }, 'kept network slot is gone or outside the range: not re-adopted');
        continue;
      }
      this.alloc.claim(index);
      adopted.set(sandboxID, this.at(index, keepTap.has(sandboxID) ? 'tap' : 'ns'));
    }
    const kept = new Set([...adopted.values()].map((s) => s.index));
    const staleNs = [...ns].filter((i) => !kept.has(i));
    const staleLinks = new Set([...links, ...staleNs].filter((i) => !kept.has(i)));
    if (staleLinks.size > 0) this.log?.info({ netns: staleNs.length, links: staleLinks.size }, 'removing stale network slots');
    const survivors = await this.remove(
      staleNs.map((i) => netnsName(this.tag, i)),
      staleLinks,
    );
    // A veth held by a still-running process keeps its index busy until it goes.
    for (const i of survivors) {
      this.alloc.claim(i);
      this.draining.add(i);
    }
    return adopted;
  }

  /** Every slot of this tag in the kernel removed (stop with destroy). */
  async removeAll(): Promise<void> {
    const names = new Set([...(await netnsIndices(this.tag))].map((i) => netnsName(this.tag, i)));
    await this.remove([...names], new Set(await hostIfIndices(this.tag)));
  }

  /**
   * Deletes the netns (their veths go with them in the kernel's batched cleanup), waits for
   * the host ends to vanish, and deletes any that did not. Returns the indices still present.
   */
  async remove(netns: string[], indices: Set<number>): Promise<number[]> {
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
    for (const i of indices) if (!left.includes(i) && this.alloc.isTaken(i) && !this.held(i)) this.freeIndex(i);
    return left;
  }

  /** The index can be given to a new slot, whose new veth has a new MAC. */
  private freeIndex(i: number): void {
    this.eth0Macs.delete(i);
    this.alloc.free(i);
  }
}
