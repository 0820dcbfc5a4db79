// Marks nodes lost when their heartbeat stops: metrics older than scheduler.heartbeat_timeout_ms
// (three 1 s heartbeats by default) or expired. A lost node's sandboxes are marked `lost`, never
// dropped, and one node.lost event says so. Any control replica may call this; the leader lease
// makes one of them do the work.
import type { MasterConfig } from '../../config/schema.js';
import type { StateStore } from '../../store/types.js';

export const LOST_SWEEP_LEASE = 'lost-sweep';

/** Pure: is a node whose last metrics are `lastSeen` (undefined = expired or never) lost at `now`? */
export function isLost(lastSeen: number | undefined, now: number, heartbeatTimeoutMs: number): boolean {
  if (lastSeen === undefined) return true;
  return Number.isNaN(lastSeen) || now - lastSeen > heartbeatTimeoutMs;
}

/**
 * Returns the nodes this call newly marked lost (empty when another replica holds the lease).
 * A node without metrics (Redis restarted empty, or they expired) counts as silent from the
 * first sweep that saw them missing (`missingSince`, kept by the caller), so a Redis restart
 * does not make every node lost before its next heartbeat. Silence counts only from
 * `blindAt` on (the last time the caller could not watch: it saw Redis or MySQL fail, or its
 * own ticks stalled): heartbeats that could not be recorded or read meanwhile are not the
 * node's fault, so an outage pauses lost detection until the nodes have had a heartbeat
 * timeout to report again.
 */
export async function sweepLostNodes(
  store: StateStore,
  cfg: MasterConfig,
  now: number,
  holder: string,
  missingSince = new Map<string, number>(),
  blindAt = 0,
): Promise<string[]> {
  const timeout = cfg.scheduler.heartbeat_timeout_ms;
  if (!(await store.holdLease(LOST_SWEEP_LEASE, holder, 2 * timeout))) return [];
  const ids = (await store.listNodes()).map((n) => n.nodeID);
  const metrics = await store.getNodeMetrics(ids);
  const newlyLost: string[] = [];
  for (const id of ids) {
    const reported = metrics.get(id)?.lastSeen;
    if (reported !== undefined) missingSince.delete(id);
    else if (!missingSince.has(id)) missingSince.set(id, now);
    const lastSeen = reported ?? missingSince.get(id)!;
    if (!isLost(lastSeen, now, timeout) || !isLost(blindAt, now, timeout)) continue;
    // Sandboxes first: if this fails half-way the marker is not set and the next sweep redoes it.
    const marked = await store.markNodeSandboxes(id, 'lost', `node ${id} stopped heartbeating`);
    if (!(await store.markNodeLost(id))) continue;
    newlyLost.push(id);
    const secs = ((now - lastSeen) / 1000).toFixed(1);
    const age = reported === undefined ? `no metrics for ${secs}s` : `last heartbeat ${secs}s ago`;
    await store.appendEvent({ at: now, kind: 'node.lost', nodeID: id, message: `node ${id} lost (${age}); ${marked.length} sandbox(es) marked lost` });
  }
  return newlyLost;
}
