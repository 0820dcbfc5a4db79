import { fmt, type Filter } from '../plugin.js';

/**
 * The oversold cpu quota (cpus x cpu oversell x node_max_cpu_util) must hold the request, and
 * what the node's sandboxes use now (their cgroups, smoothed over about 30 s) must be under the
 * cap: a build or a benchmark elsewhere on the host does not close the node; sandboxes that
 * really use their vCPUs do. Nodes that report only the host figure are gated on it.
 */
export const cpu: Filter = ({ req, node, cfg, density }) => {
  const cap = cfg.scheduler.node_max_cpu_util;
  const live = node.usage.sandboxCpuUtilPercent;
  if (live !== undefined ? live >= cap : node.usage.cpuUtilPercent >= cap) {
    return live !== undefined ? `sandbox cpu use ${fmt(live)}% >= ${fmt(cap)}%` : `cpu util ${fmt(node.usage.cpuUtilPercent)}% >= ${fmt(cap)}%`;
  }
  const used = node.usage.quotaCpuUsed;
  if (used + req.cpus > density.cpuQuota + 1e-9) return `cpu quota ${fmt(used)}+${fmt(req.cpus)} > ${fmt(density.cpuQuota)}`;
  return undefined;
};
