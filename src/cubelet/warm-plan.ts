// The warm pools' decisions (pure; the pool in warm-pool.ts carries them out): which templates
// are wanted and how many, how many warm sandboxes the node has room for beside its real ones, and
// the next step (what to drop, what to make).
import type { CubeletConfig, MasterConfig } from '../config/schema.js';
import { computeDensity, densityParamsFromConfig, headroomFromUsage } from '../model/density.js';
import type { SandboxSpecView, SandboxState } from '../model/sandbox.js';
import type { TemplateRef } from '../runtime/types.js';
import type { SandboxMeta } from './meta.js';
import { heldBy } from './node-view.js';

export type WarmPoolConfig = CubeletConfig['warm_pool'];

/**
 * The size wanted per template: the ones named in warm_pool.templates always (0 turns one off),
 * every other template with a start command at warm_pool.size while it had a create on the node
 * within idle_sec (`lastCreate`: epoch ms of the last create of each).
 */
export function targetSizes(cfg: WarmPoolConfig, lastCreate: ReadonlyMap<string, number>, now: number): Map<string, number> {
  const out = new Map<string, number>();
  for (const [t, at] of lastCreate) if (now - at < cfg.idle_sec * 1000 && cfg.size > 0) out.set(t, cfg.size);
  for (const [t, n] of Object.entries(cfg.templates)) {
    if (n > 0) out.set(t, n);
    else out.delete(t);
  }
  return out;
}

export interface RoomInputs {
  capacity: { cpus: number; memoryMiB: number; declared: boolean };
  master: MasterConfig;
  memAvailableMiB: number;
  /** The node's real sandboxes (creates in flight among them). */
  real: readonly { state: SandboxState; spec: SandboxSpecView }[];
  /** The spec warm sandboxes are made with (the default spec). */
  spec: SandboxSpecView;
}

/**
 * How many warm sandboxes the node may hold beside its real ones: the headroom they leave by the
 * rules a create is admitted by (memory quota, CPU quota, node_max_mvm_num), so a warm sandbox
 * never takes room a real one could have; none while the memory really available is under the
 * reserve on a node whose capacity is read from the host (the mem filter's second rule: there the
 * node takes no create either, and warm sandboxes are what it can give back at once).
 */
export function warmRoom(i: RoomInputs): number {
  const params = densityParamsFromConfig(i.master);
  const spec = { cpus: i.spec.cpus, memoryMiB: i.spec.memoryMiB };
  let d;
  try {
    d = computeDensity(i.capacity, params, spec);
  } catch {
    return 0; // a node whose figures admit nothing (reserve over its memory) holds no warm sandbox either
  }
  if (!i.capacity.declared && i.memAvailableMiB < i.capacity.memoryMiB - d.memBudgetMiB) return 0;
  const u = heldBy(i.real, params);
  return headroomFromUsage(i.capacity, params, spec, { memUsedMiB: u.memUsed, cpuUsed: u.cpuUsed, releasedMiB: u.released, count: u.counts.total }).headroom;
}

export interface PoolLevel {
  template: string;
  ready: number;
  /** Being made now (0 or 1: one at a time on the node). */
  starting: number;
}

export interface Step {
  /** Templates to take one ready warm sandbox from and destroy, one entry per sandbox. */
  drop: string[];
  /** The template to make one more of, when nothing is being made. */
  make?: string;
}

/**
 * The next step (pure). Dropped first: ready sandboxes of templates no longer wanted or over their
 * size, then, while the warm sandboxes (ready and starting) exceed `room`, ready ones of the
 * template with the most. One is made when nothing is being made, some wanted template is short
 * and there is room for one more: the shortest first (then by name, so the order is stable).
 * `skip`: templates whose last make failed recently (they wait their back-off).
 */
export function nextStep(targets: ReadonlyMap<string, number>, levels: readonly PoolLevel[], room: number, skip: ReadonlySet<string> = new Set()): Step {
  const ready = new Map(levels.map((l) => [l.template, l.ready]));
  const drop: string[] = [];
  for (const [t, n] of ready) {
    const over = n - (targets.get(t) ?? 0);
    for (let k = 0; k < over; k++) drop.push(t);
    if (over > 0) ready.set(t, n - over);
  }
  const starting = levels.reduce((n, l) => n + l.starting, 0);
  let total = starting + [...ready.values()].reduce((a, b) => a + b, 0);
  while (total > room) {
    const [t, n] = [...ready].sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0]))[0] ?? ['', 0];
    if (n === 0) break; // only the one starting is left: it is looked at again when it is ready
    drop.push(t);
    ready.set(t, n - 1);
    total--;
  }
  if (starting > 0 || total >= room) return { drop };
  const short = [...targets]
    .filter(([t, n]) => !skip.has(t) && (ready.get(t) ?? 0) < n)
    .sort((a, b) => (ready.get(a[0]) ?? 0) - (ready.get(b[0]) ?? 0) || a[0].localeCompare(b[0]));
  return short.length ? { drop, make: short[0]![0] } : { drop };
}

/**
 * Whether a warm sandbox can serve a create (pure): the same spec; the runtime it was made with
 * unless the create names none; no snapshot to start from, no volumes, no raw sockets (each of those
 * is given at create time and cannot be added to a running sandbox). Egress rules can: they are
 * set on the claimed sandbox's slot before the create returns.
 */
export function fitsWarm(
  w: { spec: SandboxSpecView; runtime: string },
  m: { spec: SandboxSpecView; runtime?: string; fromSnapshot?: string; volumes?: readonly unknown[]; metadata: Record<string, string> },
): boolean {
  return (
    w.spec.cpus === m.spec.cpus &&
    w.spec.memoryMiB === m.spec.memoryMiB &&
    w.spec.diskGiB === m.spec.diskGiB &&
    (m.runtime === undefined || m.runtime === w.runtime) &&
    m.fromSnapshot === undefined &&
    !m.volumes?.length &&
    m.metadata['cube.net_raw'] !== 'true'
  );
}

/** A warm sandbox's record: its runtime id for all ids, the template's env alone, no timeout (its pool ends it). */
export function warmMeta(runtimeID: string, templateID: string, spec: SandboxSpecView): SandboxMeta {
  const meta = { sandboxID: runtimeID, warm: true, templateID, spec: { ...spec }, slotIndex: -1, startedAt: Date.now() };
  return { ...meta, endAt: Number.MAX_SAFE_INTEGER, metadata: {}, env: {}, paused: false };
}

/** A claimed warm sandbox's record (pure): the create's, with what the warm one was made with (its runtime id, slot, runtime, workdir). */
export function claimedMeta(warm: SandboxMeta, create: SandboxMeta): SandboxMeta {
  const { slotIndex, slotMode, runtime, workdir } = warm;
  const made = { ...(slotMode ? { slotMode } : {}), ...(runtime ? { runtime } : {}), ...(workdir ? { workdir } : {}) };
  return { ...create, runtimeID: warm.sandboxID, slotIndex, ...made };
}

/** What a template is made of (its digest, else its layers): a warm sandbox serves creates of the same content only. */
export function templateKey(t: TemplateRef): string {
  return t.digest ?? t.layers.join(':');
}
