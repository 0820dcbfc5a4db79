// The placement chain, assembled in one place: prefilter -> enabled filters (a node must pass
// all; the first refusal is kept with its reason) -> weighted scorers, until candidate_limit
// nodes passed -> random pick among the top priority_select_num. Pure: the config, clock and randomness come in as arguments, so
// a hot-reloaded config takes effect on the next decision.
import type { MasterConfig } from '../config/schema.js';
import { CubeError } from '../errors.js';
import { computeDensity, densityParamsFromConfig, DensityInputError, type Density, type DensityParams } from '../model/density.js';
import { FILTERS } from './filters/index.js';
import { passesPrefilter, preparedPrefilter } from './filters/prefilter.js';
import {
  prepareNode,
  type Candidate,
  type Filter,
  type NodeContext,
  type NodeShape,
  type PlacementRequest,
  type PreparedNode,
  type Rejection,
  type Scorer,
} from './plugin.js';
import { SCORERS } from './scorers/index.js';

export type ScheduleResult = { ok: true; nodeID: string; score: number } | { ok: false; rejections: Rejection[] };

/** What a decision takes from the config, made once per config object (a hot reload brings a new one). */
interface Plan {
  params: DensityParams;
  filters: { name: string; filter: Filter }[];
  scorers: { run: Scorer; weight: number }[];
  weightSum: number;
  /** Densities by request spec ("cpus/memoryMiB"), each indexed by NodeShape.id. */
  densities: Map<string, (Density | DensityInputError | undefined)[]>;
}

const plans = new WeakMap<MasterConfig, Plan>();
function planOf(cfg: MasterConfig): Plan {
  let plan = plans.get(cfg);
  if (plan === undefined) {
    const weights = cfg.scheduler.score.resource_weights;
    const scorers = cfg.scheduler.score.enable_scorers.map((name) => ({ run: SCORERS[name], weight: weights[name] ?? 0 })).filter((s) => s.weight > 0);
    plan = {
      params: densityParamsFromConfig(cfg),
      filters: cfg.scheduler.filter.enable_filters.map((name) => ({ name, filter: FILTERS[name] })),
      scorers,
      weightSum: scorers.reduce((a, s) => a + s.weight, 0),
      densities: new Map(),
    };
    plans.set(cfg, plan);
  }
  return plan;
}

/**
 * The density table of one spec: nodes of one capacity share it, and it outlives the decision
 * (computing the 18 shapes of 1000 simulated nodes in each decision was a fifth of its time in
 * a profile of bench/scheduler.ts --book).
 */
function densityTable(plan: Plan, req: PlacementRequest): (Density | DensityInputError | undefined)[] {
  const key = `${req.cpus}/${req.memoryMiB}`;
  let table = plan.densities.get(key);
  if (table === undefined) {
    if (plan.densities.size >= 1000) plan.densities.clear();
    plan.densities.set(key, (table = []));
  }
  return table;
}

function densityOf(
  table: (Density | DensityInputError | undefined)[],
  shape: NodeShape,
  params: DensityParams,
  req: PlacementRequest,
): Density | DensityInputError {
  let d = table[shape.id];
  if (d === undefined) {
    try {
      d = computeDensity(shape, params, req);
    } catch (e) {
      if (!(e instanceof DensityInputError)) throw e;
      d = e;
    }
    table[shape.id] = d;
  }
  return d;
}

// A node's verdict in the loop: it passes, or the rule that refused it (a filter's index in Plan.filters, or one of these).
const PASSES = -1;
const BY_RUNTIME = -2;
const BY_PREFILTER = -3;
const BY_CAPACITY = -4;
const BY_NET_RAW = -5;

/** The index of the first filter that refuses, or PASSES. */
function firstRefusal(filters: Plan['filters'], ctx: NodeContext): number {
  for (let f = 0; f < filters.length; f++) if (!filters[f]!.filter.passes(ctx)) return f;
  return PASSES;
}

/** The candidate's prepared node, made now when it has none for its current view. */
const preparedOf = (c: Candidate): PreparedNode => (c.prepared !== undefined && c.prepared.view === c.view ? c.prepared : prepareNode(c.view));

/** The runtime a request needs on this node, if any: its own, else its template's default there. */
const runtimeFor = (req: PlacementRequest, node: PreparedNode): string | undefined => req.runtime ?? node.templateRuntimes?.[req.templateID];

/**
 * A create asking for raw sockets goes only where the runtime it gets accepts them: the node
 * refuses it otherwise (403, 130436), and placing it there instead of on a node that allows it
 * made the answer depend on the random pick. Like the runtime, a fact of the node, not a setting.
 */
const refusesNetRaw = (req: PlacementRequest, node: PreparedNode, runtime: string | undefined): boolean =>
  req.netRaw === true && !node.netRawRuntimes.includes(runtime ?? node.view.runtime);

export function schedule(req: PlacementRequest, nodes: Candidate[], cfg: MasterConfig, now: number, rand: () => number = Math.random): ScheduleResult {
  if (!(req.cpus > 0) || !(req.memoryMiB > 0))
    throw new CubeError('BAD_REQUEST', `cpus and memory must be positive (got ${req.cpus} cpus, ${req.memoryMiB} MiB)`);
  const plan = planOf(cfg);
  const { params, filters, scorers, weightSum } = plan;
  const densities = densityTable(plan, req);
  const timeout = cfg.scheduler.heartbeat_timeout_ms;
  const topN = cfg.scheduler.priority_select_num;

  // Refused nodes as candidate index and rule (BY_* or a filter's index): the words are built
  // only when the decision is refused.
  const refusedAt: number[] = [];
  const refusedBy: number[] = [];
  const top: Ranked[] = [];
  let ctx: NodeContext | undefined;
  let considered = 0;
  // A decision over 1000 nodes scored all of them (p99 15-23 ms in the control under load); it
  // now stops after `candidate_limit` feasible ones, visited from a random start so that
  // successive decisions look at different nodes. Refused nodes do not count, so when nothing
  // fits every node is still visited and the refusal lists them all.
  const limit = cfg.scheduler.candidate_limit;
  const start = limit > 0 && nodes.length > limit ? Math.floor(rand() * nodes.length) : 0;
  let feasible = 0;
  for (let k = 0; k < nodes.length && (limit === 0 || feasible < limit); k++) {
    const i = start + k < nodes.length ? start + k : start + k - nodes.length;
    const c = nodes[i]!;
    const node = preparedOf(c);
    if (req.nodeID !== undefined && node.nodeID !== req.nodeID) continue;
    considered++;
    const runtime = runtimeFor(req, node);
    let by = PASSES;
    if (runtime !== undefined && !node.runtimes.includes(runtime)) by = BY_RUNTIME;
    else if (refusesNetRaw(req, node, runtime)) by = BY_NET_RAW;
    else if (!passesPrefilter(node, timeout, now)) by = BY_PREFILTER;
    else {
      const density = densityOf(densities, node.capacity, params, req);
      if (density instanceof DensityInputError) by = BY_CAPACITY;
      else {
        if (ctx === undefined) ctx = { req, node, inFlightCreates: c.inFlightCreates, cfg, now, density };
        else {
          ctx.node = node;
          ctx.inFlightCreates = c.inFlightCreates;
          ctx.density = density;
        }
        by = firstRefusal(filters, ctx);
      }
    }
    if (by !== PASSES) {
      refusedAt.push(i);
      refusedBy.push(by);
      continue;
    }
    let score = 0;
    if (weightSum > 0) {
      for (let s = 0; s < scorers.length; s++) score += scorers[s]!.weight * scorers[s]!.run(ctx!);
      score /= weightSum;
    }
    insertTop(top, node.nodeID, score, rand(), topN);
    feasible++;
  }
  if (top.length > 0) {
    const pick = top[Math.min(top.length - 1, Math.floor(rand() * top.length))]!;
    return { ok: true, nodeID: pick.nodeID, score: pick.score };
  }
  const rejections = refusedAt.map((i, n) => rejection(nodes[i]!, refusedBy[n]!, req, plan, densities, cfg, now));
  if (req.nodeID !== undefined && considered === 0) rejections.push({ nodeID: req.nodeID, filter: 'prefilter', reason: 'not registered' });
  return { ok: false, rejections };
}

/** The words of one refusal the loop recorded. */
function rejection(
  c: Candidate,
  by: number,
  req: PlacementRequest,
  plan: Plan,
  densities: (Density | DensityInputError | undefined)[],
  cfg: MasterConfig,
  now: number,
): Rejection {
  const node = preparedOf(c);
  if (by === BY_RUNTIME) {
    const why = req.runtime === undefined ? ` (template ${req.templateID}'s default)` : '';
    return { nodeID: node.nodeID, filter: 'runtime', reason: `runtime ${node.runtimes.join(', ')}, not ${runtimeFor(req, node)}${why}` };
  }
  if (by === BY_NET_RAW)
    return {
      nodeID: node.nodeID,
      filter: 'net_raw',
      reason: `runtime ${runtimeFor(req, node) ?? node.view.runtime} here does not allow raw sockets (cubelet identity.allow_net_raw)`,
    };
  if (by === BY_PREFILTER)
    return { nodeID: node.nodeID, filter: 'prefilter', reason: preparedPrefilter(node, cfg.scheduler.heartbeat_timeout_ms, now) ?? 'refused' };
  const density = densityOf(densities, node.capacity, plan.params, req);
  if (density instanceof DensityInputError) return { nodeID: node.nodeID, filter: 'capacity', reason: density.message };
  const { name, filter } = plan.filters[by]!;
  return { nodeID: node.nodeID, filter: name, reason: filter.reason({ req, node, inFlightCreates: c.inFlightCreates, cfg, now, density }) ?? 'refused' };
}

interface Ranked {
  nodeID: string;
  score: number;
  /** Random: orders equal scores, so ties do not always go to the nodes listed first. */
  tie: number;
}

const better = (score: number, tie: number, b: Ranked) => score > b.score || (score === b.score && tie < b.tie);

/**
 * Keeps `top` sorted best first, at most `n` long. Equal scores are ordered by their random
 * `tie`: with arrival order, a fleet of identical empty nodes sent every placement to the same
 * first N (200 creates on 1000 simulated nodes landed on 72-95 of them). An entry is made only
 * for a node that gets in.
 */
function insertTop(top: Ranked[], nodeID: string, score: number, tie: number, n: number): void {
  if (top.length === n && !better(score, tie, top[n - 1]!)) return;
  let i = top.length;
  while (i > 0 && better(score, tie, top[i - 1]!)) i--;
  top.splice(i, 0, { nodeID, score, tie });
  if (top.length > n) top.pop();
}

/** One line naming every refused node and the rule that refused it, for 130597 and the event stream. */
export function describeRejections(rejections: Rejection[]): string {
  if (rejections.length === 0) return 'no nodes registered';
  return rejections.map((r) => `${r.nodeID}: ${r.reason}`).join('; ');
}
