// Restart re-adoption: what a starting cubelet takes back of the sandboxes the kernel still holds
// (containerd's shim_load.go is the same room). A sandbox is taken back when its record (meta)
// names it, its driver says it lives, its agent answers where it has one (a running microVM's
// guest agent: a QEMU pid alone serves nothing, as containerd trusts a shim only once it answers
// on its socket), and the network agent restored its slot; the driver's cleanup removes
// everything else, and each sandbox id it removed gets a typed reason for its tombstone.
import { isSandboxID } from '../ids.js';
import type { DeathReason } from '../model/death.js';
import type { NetSlot, NetworkAgent } from '../network/types.js';
import type { RuntimeDriver, SandboxHandle } from '../runtime/types.js';
import { agentSilence } from './deaths.js';
import { runtimeIdOf, type MetaKeeper, type SandboxMeta } from './meta.js';

/** How long a restarted node waits for a microVM's guest agent to answer before it gives the VM up. */
export const AGENT_ANSWER_MS = 5_000;

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
  reason: DeathReason;
  message: string;
}

export interface Readoption {
  adopted: (Found & { slot: NetSlot })[];
  /** Everything the driver's cleanup removed (sandbox ids, and other leftovers it names). */
  removed: string[];
  lost: NotReadopted[];
}

/**
 * The candidates among what the kernel holds (pure): a record that names the sandbox, an init
 * alive, and not warm (a warm sandbox is destroyed at a restart: the pool makes new ones, and a
 * sandbox nobody claimed is not worth the restart's time to check).
 */
export function candidates(scanned: readonly Scanned[]): Found[] {
  return scanned.flatMap((s) => (s.meta && runtimeIdOf(s.meta) === s.h.sandboxID && s.alive && !s.meta.warm ? [{ h: s.h, meta: s.meta }] : []));
}

/**
 * Why each sandbox the cleanup removed was not taken back (pure). What it held before the restart
 * and could not take back (a half-made create among them: its client had no answer, and the
 * tombstone tells one that asks). Removed names that are no sandbox id are not sandboxes.
 * `silent`: candidates whose agent did not answer, with what their death says.
 */
export function notReadopted(
  removed: readonly string[],
  found: readonly Found[],
  silent: ReadonlyMap<string, { reason: DeathReason; message: string }>,
  nodeID: string,
): NotReadopted[] {
  return removed.filter(isSandboxID).map((id) => {
    const death = silent.get(id);
    if (death) return { sandboxID: id, ...death, message: `node ${nodeID}: ${death.message}` };
    const why = found.some((f) => f.h.sandboxID === id) ? 'its network slot could not be restored' : 'its init was no longer running';
    return { sandboxID: id, reason: 'not_readopted', message: `node ${nodeID} restarted and could not re-adopt it: ${why}` };
  });
}

/**
 * The candidates whose agent must answer before they are taken back: running ones of a driver
 * with an agent (a paused microVM's is stopped, or its memory is in a file: it cannot answer).
 */
export function mustAnswer(found: readonly Found[], driverHasAgent: boolean): Found[] {
  return driverHasAgent ? found.filter((f) => !f.meta.paused) : [];
}

/** Reconciles with what the kernel holds (the driver initialised): re-adopts complete live sandboxes, removes everything else. */
export async function readopt(o: { driver: RuntimeDriver; network: NetworkAgent; meta: MetaKeeper; nodeID: string }): Promise<Readoption> {
  const { driver, network } = o;
  const scanned: Scanned[] = [];
  for (const h of await driver.scan()) {
    const meta = await o.meta.read(h.dir);
    scanned.push({ h, meta, alive: meta !== undefined && runtimeIdOf(meta) === h.sandboxID && driver.alive(h) });
  }
  const live = candidates(scanned);
  // Asked together: a silent agent costs the start its deadline once, not once per VM.
  const asked = mustAnswer(live, driver.answers !== undefined);
  const answered = await Promise.all(asked.map((f) => driver.answers!(f.h, AGENT_ANSWER_MS)));
  const silent = new Map(asked.flatMap((f, i) => (answered[i] ? [] : [[f.h.sandboxID, agentSilence(AGENT_ANSWER_MS, 'restart')] as const])));
  const found = live.filter((f) => !silent.has(f.h.sandboxID));
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
  // Runtime ids back to the ids clients know; warm sandboxes were nobody's.
  const metaOf = new Map(scanned.flatMap((s) => (s.meta ? [[s.h.sandboxID, s.meta] as const] : [])));
  const lost = notReadopted(removed, found, silent, o.nodeID)
    .filter((l) => !metaOf.get(l.sandboxID)?.warm)
    .map((l) => ({ ...l, sandboxID: metaOf.get(l.sandboxID)?.sandboxID ?? l.sandboxID }));
  return { adopted, removed, lost };
}
