// The admin API's wire at the edge: the model's sandbox with its times as ISO 8601 (src/api/types.ts).
import { publicView, type SandboxRecord, type SandboxView as ModelSandboxView } from '../../model/sandbox.js';
import type { WatchMessage as ModelWatchMessage } from '../../model/watch.js';
import type { SandboxView, WatchMessage } from '../types.js';

/** A record or view without the owner's secrets (publicView), its times in ISO 8601. */
export function sandboxWire(v: SandboxRecord | ModelSandboxView): SandboxView {
  const view = 'accessToken' in v ? publicView(v) : v;
  return { ...view, startedAt: new Date(view.startedAt).toISOString(), endAt: new Date(view.endAt).toISOString() };
}

export function watchWire(m: ModelWatchMessage): WatchMessage {
  if (m.type === 'sandbox') return { type: 'sandbox', sandbox: sandboxWire(m.sandbox) };
  if (m.type === 'snapshot') return { type: 'snapshot', snapshot: { ...m.snapshot, sandboxes: m.snapshot.sandboxes.map(sandboxWire) } };
  return m;
}
