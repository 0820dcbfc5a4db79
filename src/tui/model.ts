// The console's data model and the pure reducer that applies watch-stream messages to it.
// Unchanged rows keep their object identity, so memoised rows skip work.
import type { ConfigChange, ConfigView, EventView, KeyView, NodeView, SandboxUsage, SandboxView, SnapshotView, StatsView, WatchMessage } from '../api/types.js';

/** A template as the templates view shows it: the listing (which nodes hold it) and its latest build's status. */
export interface TemplateRow {
  templateID: string;
  nodes: string[];
  digest?: string;
  sizeBytes?: number;
  layers?: number;
  source?: string;
  created?: string;
  buildID?: string;
  /** The build's status (`ready`, `building`, `error`...), when it was made by a build. */
  build?: string;
}

/** A sandbox as the console holds it: the watch's view, and its live use once polled (GET /admin/v1/usage). */
export interface SandboxRow extends SandboxView {
  usage?: SandboxUsage;
}

/** Events kept for the events view (k9s keeps about 500 log lines). */
export const EVENT_BUFFER = 500;

/** Events fetched per page when the operator pages back into the daemon's history (`o`). */
export const EVENT_PAGE = 100;

/** Events held at most once paged back: new ones no longer push the fetched pages out, up to this. */
export const EVENT_HISTORY_MAX = 10 * EVENT_BUFFER;

export interface DataState {
  nodes: Record<string, NodeView>;
  /** Node ids in display order (sorted), replaced only when membership changes. */
  nodeOrder: string[];
  sandboxes: Record<string, SandboxRow>;
  sandboxOrder: string[];
  /** Oldest first, at most eventCap. */
  events: EventView[];
  /**
   * EVENT_BUFFER until the operator pages back; then what is held, growing with each new event
   * up to EVENT_HISTORY_MAX (at 20 events/s the page fetched would be gone in 5 s otherwise).
   */
  eventCap: number;
  config: ConfigView | null;
  /** Changes of the last config message (shown after a reload). */
  lastChanges: ConfigChange[];
  stats: StatsView | null;
  /** Templates and snapshots (not on the watch stream): fetched while their views show (catalog.ts); null until then. */
  templates: TemplateRow[] | null;
  snapshots: SnapshotView[] | null;
  /** API keys with their quotas and use (GET /admin/v1/keys: never a key itself), fetched while their view shows; null until then. */
  keys: KeyView[] | null;
  /** Messages applied since start (a cheap change counter for tests and the bench). */
  applied: number;
}

export const emptyData = (): DataState => ({
  nodes: {},
  nodeOrder: [],
  sandboxes: {},
  sandboxOrder: [],
  events: [],
  eventCap: EVENT_BUFFER,
  config: null,
  lastChanges: [],
  stats: null,
  templates: null,
  snapshots: null,
  keys: null,
  applied: 0,
});

const byKey = <T>(items: readonly T[], key: (t: T) => string): Record<string, T> => Object.fromEntries(items.map((t) => [key(t), t]));
const sorted = (ids: Iterable<string>): string[] => [...ids].sort();

function upsert<T>(map: Record<string, T>, order: string[], id: string, item: T): { map: Record<string, T>; order: string[] } {
  const known = id in map;
  return { map: { ...map, [id]: item }, order: known ? order : sorted([...order, id]) };
}

function remove<T>(map: Record<string, T>, order: string[], id: string): { map: Record<string, T>; order: string[] } {
  if (!(id in map)) return { map, order };
  const { [id]: _gone, ...rest } = map;
  return { map: rest, order: order.filter((x) => x !== id) };
}

/** Events by id, oldest first, without duplicates, the newest `cap` kept. */
export function appendEvents(events: readonly EventView[], more: readonly EventView[], cap = EVENT_BUFFER): EventView[] {
  const seen = new Set(events.map((e) => e.id));
  const fresh = more.filter((e) => !seen.has(e.id));
  const merged = [...events, ...fresh];
  // Events fetched to fill the gap of a reconnect arrive after the snapshot's newer ones.
  if (fresh.length && events.length && fresh[0]!.id < events[events.length - 1]!.id) merged.sort((a, b) => a.id - b.id);
  return merged.length > cap ? merged.slice(merged.length - cap) : merged;
}

/** A page of events from before the oldest held (`o` in the events view): kept in front, the cap raised by what it adds. */
export function withOlderEvents(s: DataState, older: readonly EventView[]): DataState {
  const events = appendEvents(s.events, older, EVENT_HISTORY_MAX);
  return events.length === s.events.length ? s : { ...s, events, eventCap: Math.max(s.eventCap, events.length) };
}

export function applyMessage(s: DataState, msg: WatchMessage): DataState {
  const applied = s.applied + 1;
  switch (msg.type) {
    case 'snapshot': {
      const { nodes, sandboxes, events, config, stats } = msg.snapshot;
      return {
        nodes: byKey(nodes, (n) => n.nodeID),
        nodeOrder: sorted(nodes.map((n) => n.nodeID)),
        sandboxes: byKey(
          sandboxes.map((x) => keepUsage(s.sandboxes[x.sandboxID], x)),
          (x) => x.sandboxID,
        ),
        sandboxOrder: sorted(sandboxes.map((x) => x.sandboxID)),
        // After a reconnect the events seen before it stay (the snapshot carries only the last 100).
        events: appendEvents(
          s.events,
          [...events].sort((a, b) => a.id - b.id),
          s.eventCap,
        ),
        eventCap: s.eventCap,
        config,
        lastChanges: s.lastChanges,
        stats,
        templates: s.templates,
        snapshots: s.snapshots,
        keys: s.keys,
        applied,
      };
    }
    case 'node': {
      const u = upsert(s.nodes, s.nodeOrder, msg.node.nodeID, msg.node);
      return { ...s, nodes: u.map, nodeOrder: u.order, applied };
    }
    case 'node.removed': {
      const u = remove(s.nodes, s.nodeOrder, msg.nodeID);
      return { ...s, nodes: u.map, nodeOrder: u.order, applied };
    }
    case 'sandbox': {
      // A sandbox that reached `gone` is history: the events view keeps it.
      if (msg.sandbox.state === 'gone') {
        const u = remove(s.sandboxes, s.sandboxOrder, msg.sandbox.sandboxID);
        return { ...s, sandboxes: u.map, sandboxOrder: u.order, applied };
      }
      const u = upsert(s.sandboxes, s.sandboxOrder, msg.sandbox.sandboxID, keepUsage(s.sandboxes[msg.sandbox.sandboxID], msg.sandbox));
      return { ...s, sandboxes: u.map, sandboxOrder: u.order, applied };
    }
    case 'sandbox.removed': {
      const u = remove(s.sandboxes, s.sandboxOrder, msg.sandboxID);
      return { ...s, sandboxes: u.map, sandboxOrder: u.order, applied };
    }
    case 'event': {
      const eventCap = s.eventCap > EVENT_BUFFER ? Math.min(EVENT_HISTORY_MAX, s.eventCap + 1) : s.eventCap;
      return { ...s, events: appendEvents(s.events, [msg.event], eventCap), eventCap, applied };
    }
    case 'config':
      // A message without changes (a rejected file, a fix back to the config in force) keeps the last reload's highlights.
      return { ...s, config: msg.config, lastChanges: msg.changes.length ? msg.changes : s.lastChanges, applied };
    case 'stats':
      return { ...s, stats: msg.stats, applied };
  }
}

/** A new view of a sandbox keeps the live use last polled for it (the watch does not carry use). */
function keepUsage(prev: SandboxRow | undefined, next: SandboxView): SandboxRow {
  return prev?.usage ? { ...next, usage: prev.usage } : next;
}

const sameUsage = (a: SandboxUsage | undefined, b: SandboxUsage): boolean =>
  !!a &&
  a.cpuPercent === b.cpuPercent &&
  a.memoryBytes === b.memoryBytes &&
  a.memoryLimitBytes === b.memoryLimitBytes &&
  a.pids === b.pids &&
  a.diskUsedBytes === b.diskUsedBytes &&
  a.netRxBytes === b.netRxBytes &&
  a.netTxBytes === b.netTxBytes;

/** Live use polled from the daemon laid on the sandboxes it names; rows whose use did not move keep their identity (pure). */
export function withUsage(s: DataState, list: readonly SandboxUsage[]): DataState {
  let sandboxes: Record<string, SandboxRow> | undefined;
  for (const u of list) {
    const row = s.sandboxes[u.sandboxID];
    if (!row || sameUsage(row.usage, u)) continue;
    sandboxes ??= { ...s.sandboxes };
    sandboxes[u.sandboxID] = { ...row, usage: u };
  }
  return sandboxes ? { ...s, sandboxes } : s;
}

/** The release ratio in force, from the config the daemon reports. */
export function releaseRatioOf(config: ConfigView | null): number | null {
  const m = config?.master as { host?: { quota?: { paused_resource_release_ratio?: unknown } } } | undefined;
  const r = m?.host?.quota?.paused_resource_release_ratio;
  return typeof r === 'number' ? r : null;
}

/** The default sandbox spec and template in force, to prefill the launch prompt. */
export function launchDefaultsOf(config: ConfigView | null): { templateID: string; cpus: number; memoryMiB: number; timeoutSec: number } {
  const sb = (
    config?.master as
      { sandbox?: { default_template?: unknown; default_timeout_sec?: unknown; default_spec?: { cpus?: unknown; memory_mib?: unknown } } } | undefined
  )?.sandbox;
  const num = (v: unknown, d: number) => (typeof v === 'number' ? v : d);
  return {
    templateID: typeof sb?.default_template === 'string' ? sb.default_template : 'base',
    cpus: num(sb?.default_spec?.cpus, 1),
    memoryMiB: num(sb?.default_spec?.memory_mib, 4096),
    timeoutSec: num(sb?.default_timeout_sec, 300),
  };
}
