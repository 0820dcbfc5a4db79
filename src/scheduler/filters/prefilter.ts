// Runs before the configured filters and cannot be turned off: a node that is down, fenced
// off by an operator, or whose metrics are stale is never a candidate. Unlike the reference
// (which only logs stale metrics) a stale node is filtered out: its numbers cannot be trusted.
import type { NodeView } from '../../model/node.js';
import { fmt, prepareNode, type PreparedNode } from '../plugin.js';

/** The pipeline's check (no allocation); `preparedPrefilter` says why. */
export const passesPrefilter = (node: PreparedNode, heartbeatTimeoutMs: number, now: number): boolean =>
  node.down === undefined && now - node.seenMs <= heartbeatTimeoutMs;

export function preparedPrefilter(node: PreparedNode, heartbeatTimeoutMs: number, now: number): string | undefined {
  if (node.down !== undefined) return node.down;
  if (Number.isNaN(node.seenMs)) return 'no heartbeat yet';
  const age = now - node.seenMs;
  if (age > heartbeatTimeoutMs) return `heartbeat ${fmt(age / 1000)}s old > ${fmt(heartbeatTimeoutMs / 1000)}s`;
  return undefined;
}

export const prefilter = (view: NodeView, heartbeatTimeoutMs: number, now: number): string | undefined =>
  preparedPrefilter(prepareNode(view), heartbeatTimeoutMs, now);
