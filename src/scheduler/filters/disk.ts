import { fmt, type Filter } from '../plugin.js';

/** The disk watermark: a node at or above it stays HEALTHY but takes nothing new. */
export const disk: Filter = ({ node, cfg }) => {
  const max = cfg.scheduler.disk_usage_max_percent;
  const used = node.usage.diskUsedPercent;
  return used >= max ? `disk ${fmt(used)}% >= ${fmt(max)}%` : undefined;
};
