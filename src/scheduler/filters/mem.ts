import { fmt, type Filter, type NodeContext } from '../plugin.js';

const quotaFull = ({ node, density }: NodeContext) => node.quotaMemUsedMiB + density.footprintMiB > density.memQuotaMiB + 1e-9;
const reserveOf = ({ node, density }: NodeContext) => node.capacity.memoryMiB - density.memBudgetMiB;
const shortOfReal = (ctx: NodeContext) => !ctx.node.capacity.declared && ctx.node.memAvailableMiB < reserveOf(ctx);

/**
 * The oversold memory budget ((memory - reserved) x mem oversell) must hold one more footprint
 * (memory + overhead). quotaMemUsedMiB already counts paused sandboxes at (1 - r). The reason
 * reads as sandboxes of the requested spec: "mem 117/117 (...)". A node whose capacity is read
 * from the host oversells more (host.detected): there the memory really available must also
 * stay above the reserve, or the node takes nothing until sandboxes end.
 */
export const mem: Filter = {
  passes: (ctx) => !quotaFull(ctx) && !shortOfReal(ctx),
  reason: (ctx) => {
    const { node, density } = ctx;
    const used = node.quotaMemUsedMiB;
    if (quotaFull(ctx)) {
      const held = Math.floor(used / density.footprintMiB + 1e-9);
      return `mem ${held}/${density.paperCeiling} (${fmt(used)}+${fmt(density.footprintMiB)} > ${fmt(density.memQuotaMiB)} MiB)`;
    }
    if (shortOfReal(ctx)) return `memory available ${fmt(node.memAvailableMiB)} MiB < reserve ${fmt(reserveOf(ctx))} MiB`;
    return undefined;
  },
};
