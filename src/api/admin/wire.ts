// The admin API's wire at the edge: the model's records with their times as ISO 8601 (src/api/types.ts).
import type { NodeView as ModelNodeView } from '../../model/node.js';
import { publicView, type SandboxRecord, type SandboxView as ModelSandboxView } from '../../model/sandbox.js';
import { isoTime } from '../../model/time.js';
import type { Snapshot as ModelSnapshot, WatchMessage as ModelWatchMessage } from '../../model/watch.js';
import type { NodeView, SandboxView, Snapshot, WatchMessage } from '../types.js';

/** A record or view without the owner's secrets (publicView), its times in ISO 8601. */
export function sandboxWire(v: SandboxRecord | ModelSandboxView): SandboxView {
  const view = 'accessToken' in v ? publicView(v) : v;
  return { ...view, startedAt: isoTime(view.startedAt), endAt: isoTime(view.endAt) };
}

export function nodeWire(n: ModelNodeView): NodeView {
  const { evictAt, ...rest } = n;
  return { ...rest, lastSeen: isoTime(n.lastSeen), ...(evictAt !== undefined ? { evictAt: isoTime(evictAt) } : {}) };
}

export function snapshotWire(s: ModelSnapshot): Snapshot {
  return { ...s, nodes: s.nodes.map(nodeWire), sandboxes: s.sandboxes.map(sandboxWire) };
}

export function watchWire(m: ModelWatchMessage): WatchMessage {
  if (m.type === 'sandbox') return { type: 'sandbox', sandbox: sandboxWire(m.sandbox) };
  if (m.type === 'node') return { type: 'node', node: nodeWire(m.node) };
  if (m.type === 'snapshot') return { type: 'snapshot', snapshot: snapshotWire(m.snapshot) };
  return m;
}
