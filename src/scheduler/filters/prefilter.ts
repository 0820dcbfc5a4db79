// Runs before the configured filters and cannot be turned off: a node that is down, fenced
// off by an operator, or whose metrics are stale is never a candidate. Unlike the reference
// (which only logs stale metrics) a stale node is filtered out: its numbers cannot be trusted.
import type { NodeView } from '../../model/node.js';
import { fmt } from '../plugin.js';

export function prefilter(node: NodeView, heartbeatTimeoutMs: number, now: number): string | undefined {
  if (node.lost) return 'lost (missed heartbeats)';
  if (!node.healthy) return 'unhealthy';
  if (node.cordoned) return 'cordoned';
  if (node.draining) return 'draining';
  if (Number.isNaN(node.lastSeen)) return 'no heartbeat yet';
  const age = now - node.lastSeen;
  if (age > heartbeatTimeoutMs) return `heartbeat ${fmt(age / 1000)}s old > ${fmt(heartbeatTimeoutMs / 1000)}s`;
  return undefined;
}
