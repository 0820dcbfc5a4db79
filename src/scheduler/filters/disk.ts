import { fmt, type Filter } from '../plugin.js';

/** The disk watermark: a node at or above it stays HEALTHY but takes nothing new. */
export const disk: Filter = {
  passes: ({ node, cfg }) => !(node.diskUsedPercent >= cfg.scheduler.disk_usage_max_percent),
  reason: ({ node, cfg }) => {
    const max = cfg.scheduler.disk_usage_max_percent;
    return node.diskUsedPercent >= max ? `disk ${fmt(node.diskUsedPercent)}% >= ${fmt(max)}%` : undefined;
  },
};
