// NodeView.schedulable/reason: whether a node would take a sandbox of the default spec and
// template right now, and the rule that says no. HEALTHY and SCHEDULABLE are different facts
// (a node over the disk watermark is healthy and takes nothing), so this runs the real pipeline:
// the console and `cubectl nodes` say the words a refused create (130597) says, never `yes`
// where the cpu filter refuses (issue 16: `1 schedulable` while every create failed on cpu util).
import type { MasterConfig } from '../config/schema.js';
import { computeDensity, densityParamsFromConfig, DensityInputError, type Density } from '../model/density.js';
import { POOL_EXHAUSTED, type NodeView, type RuleVerdict } from '../model/node.js';
import { FILTERS } from '../scheduler/filters/index.js';
import { prefilter } from '../scheduler/filters/prefilter.js';
import { schedule } from '../scheduler/pipeline.js';
import { prepareNode, type NodeContext } from '../scheduler/plugin.js';

export interface Schedulability {
  schedulable: boolean;
  reason: string;
  /** The rule that refused ('prefilter', a filter name, 'capacity', 'pool'); absent when schedulable. */
  refusedBy?: string;
}

export function schedulability(view: NodeView, inFlightCreates: number, cfg: MasterConfig, now: number): Schedulability {
  const spec = cfg.sandbox.default_spec;
  const r = schedule(
    { templateID: cfg.sandbox.default_template, cpus: spec.cpus, memoryMiB: spec.memory_mib, diskGiB: spec.disk_gib, nodeID: view.nodeID },
    [{ view, inFlightCreates }],
    cfg,
    now,
    () => 0,
  );
  if (!r.ok) {
    const first = r.rejections[0];
    const by = first?.filter ?? 'pipeline';
    // A node the control plane fenced off (cordon, drain, lost, stale heartbeat) keeps its words, which say more than the prefilter's.
    const reason = by === 'prefilter' && !view.schedulable && view.reason ? view.reason : (first?.reason ?? 'refused');
    return { schedulable: false, reason, refusedBy: by };
  }
  if (view.reason === POOL_EXHAUSTED) return { schedulable: false, reason: POOL_EXHAUSTED, refusedBy: 'pool' };
  return { schedulable: true, reason: '' };
}

/** The view with the scheduler's verdict for the default spec in place of the node's own, and every rule's answer (what describe shows). */
export function withSchedulability(view: NodeView, inFlightCreates: number, cfg: MasterConfig, now: number): NodeView {
  const s = schedulability(view, inFlightCreates, cfg, now);
  const { refusedBy: _old, rules: _oldRules, ...rest } = view;
  const rules = ruleVerdicts(view, inFlightCreates, cfg, now);
  return { ...rest, schedulable: s.schedulable, reason: s.reason, ...(s.refusedBy !== undefined ? { refusedBy: s.refusedBy } : {}), rules };
}

export type { RuleVerdict };

/**
 * Every rule's answer for the default spec on this node, not just the first refusal: what the
 * console's describe shows (the pipeline stops at the first refusal, this runs them all).
 */
export function ruleVerdicts(view: NodeView, inFlightCreates: number, cfg: MasterConfig, now: number): RuleVerdict[] {
  const spec = cfg.sandbox.default_spec;
  const req = { templateID: cfg.sandbox.default_template, cpus: spec.cpus, memoryMiB: spec.memory_mib, diskGiB: spec.disk_gib, nodeID: view.nodeID };
  const pre = prefilter(view, cfg.scheduler.heartbeat_timeout_ms, now);
  const out: RuleVerdict[] = [pre === undefined ? { rule: 'prefilter' } : { rule: 'prefilter', refusal: pre }];
  let density: Density;
  try {
    density = computeDensity(view.capacity, densityParamsFromConfig(cfg), req);
  } catch (e) {
    if (!(e instanceof DensityInputError)) throw e;
    return [...out, { rule: 'capacity', refusal: e.message }];
  }
  const ctx: NodeContext = { req, node: prepareNode(view), inFlightCreates, cfg, now, density };
  for (const name of cfg.scheduler.filter.enable_filters) {
    const refusal = FILTERS[name].reason(ctx);
    out.push(refusal === undefined ? { rule: name } : { rule: name, refusal });
  }
  return out;
}
