// Runs before the configured filters and cannot be turned off: a node that is down, fenced
// off by an operator, or whose metrics are stale is never a candidate. Unlike the reference
// (which only logs stale metrics) a stale node is filtered out: its numbers cannot be trusted.
import type { NodeView } from '../../model/node.js';
import { fmt } from '../plugin.js';

// A node's lastSeen changes once per heartbeat while decisions read it thousands of times a
// second; parsing ISO strings was 40% of a 1000-node decision. Bounded memo of string -> ms.
const parsed = new Map<string, number>();
function parseTime(iso: string): number {
  let t = parsed.get(iso);
  if (t === undefined) {
    if (parsed.size >= 100_000) parsed.clear();
    t = Date.parse(iso);
    parsed.set(iso, t);
  }
  return t;
}

export function prefilter(node: NodeView, heartbeatTimeoutMs: number, now: number): string | undefined {
  if (node.lost) return 'lost (missed heartbeats)';
  if (!node.healthy) return 'unhealthy';
  if (node.cordoned) return 'cordoned';
  if (node.draining) return 'draining';
  const seen = parseTime(node.lastSeen);
  if (Number.isNaN(seen)) return 'no heartbeat yet';
  const age = now - seen;
  if (age > heartbeatTimeoutMs) return `heartbeat ${fmt(age / 1000)}s old > ${fmt(heartbeatTimeoutMs / 1000)}s`;
  return undefined;
}
