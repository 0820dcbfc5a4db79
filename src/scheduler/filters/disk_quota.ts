import { fmt, type Filter, type NodeContext } from '../plugin.js';

const GIB = 1024 ** 3;

/** The quota the node's store may promise, GiB: its size x host.quota.disk_oversell_ratio (undefined: the node has no store). */
export const storeQuotaGiB = (storeBytes: number | undefined, ratio: number): number | undefined =>
  storeBytes === undefined ? undefined : (storeBytes / GIB) * ratio;

const over = ({ node, req, cfg }: NodeContext): boolean => {
  const quota = storeQuotaGiB(node.storeBytes, cfg.host.quota.disk_oversell_ratio);
  return quota !== undefined && node.quotaDiskUsedGiB + (req.diskGiB ?? 0) > quota + 1e-9;
};

/**
 * The sandbox store is not oversold beyond its ratio: the disk_gib quotas of the node's sandboxes
 * (paused ones too, their layers stay) plus the request's must fit in the store's size x
 * disk_oversell_ratio. Without it three sandboxes each under a 1 GiB quota filled a 2 GiB store
 * and a neighbour that had written nothing lost a write. A node without a store passes.
 */
export const diskQuota: Filter = {
  passes: (ctx) => !over(ctx),
  reason: (ctx) => {
    if (!over(ctx)) return undefined;
    const { node, req, cfg } = ctx;
    const ratio = cfg.host.quota.disk_oversell_ratio;
    const size = (node.storeBytes ?? 0) / GIB;
    return `disk quota ${fmt(node.quotaDiskUsedGiB)}+${fmt(req.diskGiB ?? 0)} > ${fmt(size * ratio)} GiB (store ${fmt(size)} GiB x ${fmt(ratio)} disk oversell)`;
  },
};
