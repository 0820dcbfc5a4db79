// The console's data model and the pure reducer that applies watch-stream messages to it.
// Unchanged rows keep their object identity, so memoised rows skip work.
import type { ConfigChange, ConfigView, EventView, NodeView, SandboxView, StatsView, WatchMessage } from '../api/types.js';

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
  sandboxes: Record<string, SandboxView>;
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
        sandboxes: byKey(sandboxes, (x) => x.sandboxID),
        sandboxOrder: sorted(sandboxes.map((x) => x.sandboxID)),
        // After a reconnect the events seen before it stay (the snapshot carries only the last 100).
        events: appendEvents(s.events, [...events].sort((a, b) => a.id - b.id), s.eventCap),
        eventCap: s.eventCap,
        config,
        lastChanges: s.lastChanges,
        stats,
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
      const u = upsert(s.sandboxes, s.sandboxOrder, msg.sandbox.sandboxID, msg.sandbox);
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

/** The release ratio in force, from the config the daemon reports. */
export function releaseRatioOf(config: ConfigView | null): number | null {
  const m = config?.master as { host?: { quota?: { paused_resource_release_ratio?: unknown } } } | undefined;
  const r = m?.host?.quota?.paused_resource_release_ratio;
  return typeof r === 'number' ? r : null;
}

/** The default sandbox spec and template in force, to prefill the launch prompt. */
export function launchDefaultsOf(config: ConfigView | null): { templateID: string; cpus: number; memoryMiB: number; timeoutSec: number } {
  const sb = (config?.master as { sandbox?: { default_template?: unknown; default_timeout_sec?: unknown; default_spec?: { cpus?: unknown; memory_mib?: unknown } } } | undefined)?.sandbox;
  const num = (v: unknown, d: number) => (typeof v === 'number' ? v : d);
  return {
    templateID: typeof sb?.default_template === 'string' ? sb.default_template : 'base',
    cpus: num(sb?.default_spec?.cpus, 1),
    memoryMiB: num(sb?.default_spec?.memory_mib, 4096),
    timeoutSec: num(sb?.default_timeout_sec, 300),
  };
}
