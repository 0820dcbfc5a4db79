// The shapes every filter and scorer shares. A filter answers "can this node take the
// request, and if not, why" (the reason names the rule and the numbers behind it); a scorer
// rates a node that passed every filter on 0-100 (higher = more headroom).
import type { MasterConfig } from '../config/schema.js';
import type { Density } from '../model/density.js';
import type { NodeView } from '../model/node.js';

export interface PlacementRequest {
  templateID: string;
  cpus: number;
  memoryMiB: number;
  /** Place on this node only. */
  nodeID?: string;
  /** Place only on nodes running this runtime driver. */
  runtime?: string;
  /** Cluster: the template is on some node, so a node that fetches templates (NodeView.layers) may take it without holding it. */
  fetchable?: boolean;
}

export interface Candidate {
  view: NodeView;
  /** Creates the control plane has sent to this node that have not finished yet. */
  inFlightCreates: number;
}

/** Everything a filter or scorer may look at for one node; built once per node per decision. */
export interface NodeContext {
  req: PlacementRequest;
  node: NodeView;
  inFlightCreates: number;
  cfg: MasterConfig;
  now: number;
  /** The node's density for the requested spec under the config in force. */
  density: Density;
}

/** Returns why the node is refused, or undefined when it passes. */
export type Filter = (ctx: NodeContext) => string | undefined;

/** 0-100, higher is better. */
export type Scorer = (ctx: NodeContext) => number;

export interface Rejection {
  nodeID: string;
  filter: string;
  reason: string;
}

/** Numbers in refusals: integers as they are, others with at most one decimal. */
export function fmt(n: number): string {
  return Number.isInteger(n) ? String(n) : String(Math.round(n * 10) / 10);
}

/** 100 - 100 x used/limit, clamped to 0-100 (an unlimited or zero limit scores 0 when anything is used). */
export function headroomScore(used: number, limit: number): number {
  if (!(limit > 0)) return used > 0 ? 0 : 100;
  return Math.min(100, Math.max(0, 100 - (100 * used) / limit));
}
