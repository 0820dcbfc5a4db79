import { fmt, type Filter } from '../plugin.js';

/** The oversold cpu quota (cpus x cpu_oversell_ratio x node_max_cpu_util) must hold the request, and live utilisation must be under the cap. */
export const cpu: Filter = ({ req, node, cfg, density }) => {
  const cap = cfg.scheduler.node_max_cpu_util;
  if (node.usage.cpuUtilPercent >= cap) return `cpu util ${fmt(node.usage.cpuUtilPercent)}% >= ${fmt(cap)}%`;
  const used = node.usage.quotaCpuUsed;
  if (used + req.cpus > density.cpuQuota + 1e-9) return `cpu quota ${fmt(used)}+${fmt(req.cpus)} > ${fmt(density.cpuQuota)}`;
  return undefined;
};
