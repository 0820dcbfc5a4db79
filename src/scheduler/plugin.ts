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
  /** The writable layer's quota (disk_gib); absent: counted as 0 (the disk_quota filter then checks only what the node holds). */
  diskGiB?: number;
  /** Place on this node only. */
  nodeID?: string;
  /** Place only on nodes running this runtime driver. */
  runtime?: string;
  /** Cluster: the template is on some node, so a node that fetches templates (NodeView.layers) may take it without holding it. */
  fetchable?: boolean;
  /** The create asks for raw sockets (metadata cube.net_raw=true): only nodes whose runtime accepts it (RuntimeInfo.netRaw). */
  netRaw?: boolean;
}

export interface Candidate {
  view: NodeView;
  /** Creates the control plane has sent to this node that have not finished yet. */
  inFlightCreates: number;
  /** prepareNode(view), made when the view changed (PlacementBook); absent or for another view: made per decision. */
  prepared?: PreparedNode;
}

/** A node's capacity, one object per distinct capacity: decisions compute a density per shape, not per node. */
export interface NodeShape {
  readonly id: number;
  readonly cpus: number;
  readonly memoryMiB: number;
  readonly declared: boolean;
}

// By cpus, then memory, then declared: no key string built per view (1000 views per metrics read).
const shapes = new Map<number, Map<number, NodeShape[]>>();
let shapeCount = 0;
let nextShapeID = 0;
function shapeOf(c: NodeView['capacity']): NodeShape {
  const declared = c.declared !== false;
  let byMem = shapes.get(c.cpus);
  if (byMem === undefined) shapes.set(c.cpus, (byMem = new Map()));
  let pair = byMem.get(c.memoryMiB);
  if (pair === undefined) byMem.set(c.memoryMiB, (pair = []));
  const i = declared ? 1 : 0;
  let s = pair[i];
  if (s === undefined) {
    // Capacities are fixed per node, so this stays small; bounded all the same (ids are never reused).
    if (shapeCount >= 10_000) {
      shapes.clear();
      shapeCount = 0;
    }
    pair[i] = s = { id: nextShapeID++, cpus: c.cpus, memoryMiB: c.memoryMiB, declared };
    shapeCount++;
  }
  return s;
}

// Template names as bits: whether a node holds the requested template is one AND on a number in
// the node's object, not a walk over its list: in the control (1000 simulated nodes) the list
// walk was 71 of the 118 profile samples taken in decisions, the bits 1 of 45.
const templateBits = new Map<string, number>();
const TEMPLATE_BITS = 30;
let askedName: string | undefined;
let askedBit = 0;
/** The template's bit, 0 when it has none (more than TEMPLATE_BITS names): one Map lookup per name asked in a row. */
function bitOf(templateID: string): number {
  if (templateID !== askedName) {
    askedName = templateID;
    askedBit = templateBits.get(templateID) ?? 0;
  }
  return askedBit;
}

/**
 * What filters and scorers read of a node, taken from its view once per view (a view is never
 * changed, only replaced). Views come from JSON, operator flags and placement overlays in many
 * object shapes: read in the loop, every property load was megamorphic, and looking the lastSeen
 * string up in a memo of parsed times was 31% of a decision (profile of bench/scheduler.ts
 * --book). One shape (prepareNode), flat fields.
 */
export interface PreparedNode {
  readonly view: NodeView;
  readonly nodeID: string;
  /** Why the prefilter refuses the node whatever the request (lost, unhealthy, cordoned, draining), else undefined. */
  readonly down: string | undefined;
  /** lastSeen in ms since the epoch (NaN: never). */
  readonly seenMs: number;
  readonly capacity: NodeShape;
  readonly cpuUtilPercent: number;
  readonly sandboxCpuUtilPercent: number | undefined;
  readonly memAvailableMiB: number;
  readonly diskUsedPercent: number;
  readonly quotaMemUsedMiB: number;
  readonly quotaCpuUsed: number;
  /** Disk quotas its sandboxes hold, GiB (0 from nodes that do not say). */
  readonly quotaDiskUsedGiB: number;
  /** Its sandbox store's size in bytes; undefined on runtimes without one (nothing to count disk against). */
  readonly storeBytes: number | undefined;
  /** Sandboxes on the node, paused ones included. */
  readonly sandboxes: number;
  readonly templates: readonly string[];
  /** The bits of its templates (bitOf). */
  readonly templateMask: number;
  /** It holds a template that has no bit. */
  readonly unbitted: boolean;
  /** The node fetches the templates it lacks (it reports layers). */
  readonly fetches: boolean;
  /** Its template fetches under way; undefined when none. */
  readonly fetching: readonly string[] | undefined;
  /** The runtimes it offers, default first when it lists none. */
  readonly runtimes: readonly string[];
  /** Those of them that accept a create asking for raw sockets (RuntimeInfo.netRaw). */
  readonly netRawRuntimes: readonly string[];
  /** Undefined when no template names a runtime of its own. */
  readonly templateRuntimes: Readonly<Record<string, string>> | undefined;
  /** Its warm pools per template (ready sandboxes); undefined when it holds none. */
  readonly warm: NonNullable<NodeView['warm']>['templates'] | undefined;
}

/** Whether the node holds the template (every name a node was prepared with has its bit, unless the bits ran out). */
export function holds(node: PreparedNode, templateID: string): boolean {
  const bit = bitOf(templateID);
  return bit !== 0 ? (node.templateMask & bit) !== 0 : node.unbitted && node.templates.includes(templateID);
}

function isEmpty(o: object): boolean {
  for (const _ in o) return false;
  return true;
}

/**
 * Made for every node at each metrics read (PlacementBook.setViews): one object literal, its
 * fields always in this order (one hidden class). A class with declared fields (ES2022: each
 * defined, then assigned) took 3.5 ms per 1000 views, the literal 1.7-2.2 (Date.parse 0.5-1.4 of it).
 */
export function prepareNode(view: NodeView): PreparedNode {
  let templateMask = 0;
  let unbitted = false;
  for (const t of view.templates) {
    let bit = templateBits.get(t);
    if (bit === undefined && templateBits.size < TEMPLATE_BITS) {
      templateBits.set(t, (bit = 1 << templateBits.size));
      askedName = undefined; // bitOf may have said 0 for this name
    }
    if (bit === undefined) unbitted = true;
    else templateMask |= bit;
  }
  const { usage } = view;
  return {
    view,
    nodeID: view.nodeID,
    down: view.lost ? 'lost (missed heartbeats)' : !view.healthy ? 'unhealthy' : view.cordoned ? 'cordoned' : view.draining ? 'draining' : undefined,
    seenMs: view.lastSeen,
    capacity: shapeOf(view.capacity),
    cpuUtilPercent: usage.cpuUtilPercent,
    sandboxCpuUtilPercent: usage.sandboxCpuUtilPercent,
    memAvailableMiB: usage.memAvailableMiB,
    diskUsedPercent: usage.diskUsedPercent,
    quotaMemUsedMiB: usage.quotaMemUsedMiB,
    quotaCpuUsed: usage.quotaCpuUsed,
    quotaDiskUsedGiB: usage.quotaDiskUsedGiB ?? 0,
    storeBytes: usage.store?.sizeBytes,
    sandboxes: view.sandboxes.total,
    templates: view.templates,
    templateMask,
    unbitted,
    fetches: view.layers !== undefined,
    fetching: view.fetching !== undefined && view.fetching.length > 0 ? view.fetching : undefined,
    runtimes: view.runtimes !== undefined ? view.runtimes.map((r) => r.name) : [view.runtime],
    netRawRuntimes: view.runtimes !== undefined ? view.runtimes.filter((r) => r.netRaw === true).map((r) => r.name) : [],
    templateRuntimes: view.templateRuntimes !== undefined && !isEmpty(view.templateRuntimes) ? view.templateRuntimes : undefined,
    warm: view.warm?.templates,
  };
}

/** Everything a filter or scorer may look at for one node (a decision reuses one object for every node it visits: keep no reference). */
export interface NodeContext {
  req: PlacementRequest;
  node: PreparedNode;
  inFlightCreates: number;
  cfg: MasterConfig;
  now: number;
  /** The node's density for the requested spec under the config in force. */
  density: Density;
}

/**
 * `passes` runs for every node a decision visits and builds nothing; `reason` says why the node
 * is refused (undefined when it passes), and runs only for a refusal that is reported (a
 * decision that places reports none): building the words for every refused node visited
 * cost more than the checks.
 */
export interface Filter {
  passes(ctx: NodeContext): boolean;
  reason(ctx: NodeContext): string | undefined;
}

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
