import { fmt, type Filter, type NodeContext } from '../plugin.js';

/** Sandboxes' own use when the node reports it, else the host's. */
const util = ({ node }: NodeContext) => node.sandboxCpuUtilPercent ?? node.cpuUtilPercent;

/**
 * The oversold cpu quota (cpus x cpu oversell x node_max_cpu_util) must hold the request, and
 * what the node's sandboxes use now (their cgroups, smoothed over about 30 s) must be under the
 * cap: a build or a benchmark elsewhere on the host does not close the node; sandboxes that
 * really use their vCPUs do. Nodes that report only the host figure are gated on it.
 */
export const cpu: Filter = {
  passes: (ctx) => !(util(ctx) >= ctx.cfg.scheduler.node_max_cpu_util) && !(ctx.node.quotaCpuUsed + ctx.req.cpus > ctx.density.cpuQuota + 1e-9),
  reason: (ctx) => {
    const { req, node, cfg, density } = ctx;
    const cap = cfg.scheduler.node_max_cpu_util;
    const live = node.sandboxCpuUtilPercent;
    if (util(ctx) >= cap) return live !== undefined ? `sandbox cpu use ${fmt(live)}% >= ${fmt(cap)}%` : `cpu util ${fmt(node.cpuUtilPercent)}% >= ${fmt(cap)}%`;
    const used = node.quotaCpuUsed;
    if (used + req.cpus > density.cpuQuota + 1e-9) return `cpu quota ${fmt(used)}+${fmt(req.cpus)} > ${fmt(density.cpuQuota)}`;
    return undefined;
  },
};
