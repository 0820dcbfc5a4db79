// NodeView.schedulable/reason: whether a node would take a sandbox of the default spec and
// template right now, and the rule that says no. HEALTHY and SCHEDULABLE are different facts
// (a node over the disk watermark is healthy and takes nothing), so this runs the real pipeline.
import type { NodeView } from '../api/types.js';
import type { MasterConfig } from '../config/schema.js';
import { schedule } from './pipeline.js';

export function schedulability(view: NodeView, inFlightCreates: number, cfg: MasterConfig, now: number): { schedulable: boolean; reason: string } {
  const spec = cfg.sandbox.default_spec;
  const r = schedule({ templateID: cfg.sandbox.default_template, cpus: spec.cpus, memoryMiB: spec.memory_mib, nodeID: view.nodeID }, [{ view, inFlightCreates }], cfg, now, () => 0);
  return r.ok ? { schedulable: true, reason: '' } : { schedulable: false, reason: r.rejections[0]?.reason ?? '' };
}
