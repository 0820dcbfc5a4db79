// The admin API's wire at the edge: the model's records with their times as ISO 8601 (src/api/types.ts).
import type { EventView as ModelEventView } from '../../model/event.js';
import type { NodeView as ModelNodeView } from '../../model/node.js';
import { publicView, type SandboxRecord, type SandboxView as ModelSandboxView, type SnapshotRecord } from '../../model/sandbox.js';
import { isoTime } from '../../model/time.js';
import type { Snapshot as ModelSnapshot, WatchMessage as ModelWatchMessage } from '../../model/watch.js';
import type { EventView, NodeView, SandboxView, Snapshot, SnapshotView, WatchMessage } from '../types.js';

/** A record or view without the owner's secrets (publicView), its times in ISO 8601. */
export function sandboxWire(v: SandboxRecord | ModelSandboxView): SandboxView {
  const view = 'accessToken' in v ? publicView(v) : v;
  return { ...view, startedAt: isoTime(view.startedAt), endAt: isoTime(view.endAt) };
}

export function nodeWire(n: ModelNodeView): NodeView {
  const { evictAt, ...rest } = n;
  return { ...rest, lastSeen: isoTime(n.lastSeen), ...(evictAt !== undefined ? { evictAt: isoTime(evictAt) } : {}) };
}

/** A kept snapshot without the origin's envVars (its owner's secret, like a sandbox's), its time in ISO 8601. */
export function snapshotViewWire(s: SnapshotRecord): SnapshotView {
  const { envVars: _e, ...view } = s;
  return { ...view, createdAt: isoTime(s.createdAt) };
}

export function eventWire(e: ModelEventView): EventView {
  return { ...e, at: isoTime(e.at) };
}

export function snapshotWire(s: ModelSnapshot): Snapshot {
  return { ...s, nodes: s.nodes.map(nodeWire), sandboxes: s.sandboxes.map(sandboxWire), events: s.events.map(eventWire) };
}

export function watchWire(m: ModelWatchMessage): WatchMessage {
  if (m.type === 'sandbox') return { type: 'sandbox', sandbox: sandboxWire(m.sandbox) };
  if (m.type === 'node') return { type: 'node', node: nodeWire(m.node) };
  if (m.type === 'event') return { type: 'event', event: eventWire(m.event) };
  if (m.type === 'snapshot') return { type: 'snapshot', snapshot: snapshotWire(m.snapshot) };
  return m;
}
