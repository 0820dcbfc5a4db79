// Restart re-adoption: what a starting cubelet takes back of the sandboxes the kernel still holds
// (containerd's shim_load.go is the same room). A sandbox is taken back when its record (meta)
// names it, its driver says it lives, and the network agent restored its slot; the driver's
// cleanup removes everything else, and each sandbox id it removed gets a reason for its tombstone.
import { isSandboxID } from '../ids.js';
import type { NetSlot, NetworkAgent } from '../network/types.js';
import type { RuntimeDriver, SandboxHandle } from '../runtime/types.js';
import type { MetaKeeper, SandboxMeta } from './meta.js';

/** A sandbox the kernel holds, with what the node knows of it. */
export interface Scanned {
  h: SandboxHandle;
  /** Its record, undefined when missing or unreadable. */
  meta: SandboxMeta | undefined;
  /** What the driver says of its init (an ns init, a microVM's QEMU). */
  alive: boolean;
}

/** A candidate for re-adoption: its record names it and it lives. */
export interface Found {
  h: SandboxHandle;
  meta: SandboxMeta;
}

/** A sandbox held before the restart and not taken back, with the reason its tombstone gives. */
export interface NotReadopted {
  sandboxID: string;
  message: string;
}

export interface Readoption {
  adopted: (Found & { slot: NetSlot })[];
  /** Everything the driver's cleanup removed (sandbox ids, and other leftovers it names). */
  removed: string[];
  lost: NotReadopted[];
}

/** The candidates among what the kernel holds (pure): a record that names the sandbox, an init alive. */
export function candidates(scanned: readonly Scanned[]): Found[] {
  return scanned.flatMap((s) => (s.meta && s.meta.sandboxID === s.h.sandboxID && s.alive ? [{ h: s.h, meta: s.meta }] : []));
}

/**
 * Why each sandbox the cleanup removed was not taken back (pure). What it held before the restart
 * and could not take back (a half-made create among them: its client had no answer, and the
 * tombstone tells one that asks). Removed names that are no sandbox id are not sandboxes.
 */
export function notReadopted(removed: readonly string[], found: readonly Found[], nodeID: string): NotReadopted[] {
  return removed.filter(isSandboxID).map((id) => {
    const why = found.some((f) => f.h.sandboxID === id) ? 'its network slot could not be restored' : 'its init was no longer running';
    return { sandboxID: id, message: `node ${nodeID} restarted and could not re-adopt it: ${why}` };
  });
}

/** Reconciles with what the kernel holds (the driver initialised): re-adopts complete live sandboxes, removes everything else. */
export async function readopt(o: { driver: RuntimeDriver; network: NetworkAgent; meta: MetaKeeper; nodeID: string }): Promise<Readoption> {
  const { driver, network } = o;
  const scanned: Scanned[] = [];
  for (const h of await driver.scan()) {
    const meta = await o.meta.read(h.dir);
    scanned.push({ h, meta, alive: meta !== undefined && meta.sandboxID === h.sandboxID && driver.alive(h) });
  }
  const found = candidates(scanned);
  await network.start(
    new Map(found.map((f) => [f.h.sandboxID, f.meta.slotIndex])),
    new Map(found.flatMap((f) => (f.meta.egress ? [[f.h.sandboxID, f.meta.egress] as const] : []))),
    new Set(found.flatMap((f) => (f.meta.slotMode === 'tap' ? [f.h.sandboxID] : []))),
  );
  const adopted = found.flatMap((f) => {
    const slot = network.slotOf(f.h.sandboxID);
    return slot ? [{ ...f, slot }] : [];
  });
  const { removed } = await driver.cleanup(new Set(adopted.map((f) => f.h.sandboxID)));
  return { adopted, removed, lost: notReadopted(removed, found, o.nodeID) };
}
