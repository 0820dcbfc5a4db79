import { fmt, type Filter } from '../plugin.js';

/**
 * The oversold memory budget ((memory - reserved) x mem oversell) must hold one more footprint
 * (memory + overhead). quotaMemUsedMiB already counts paused sandboxes at (1 - r). The reason
 * reads as sandboxes of the requested spec: "mem 117/117 (...)". A node whose capacity is read
 * from the host oversells more (host.detected): there the memory really available must also
 * stay above the reserve, or the node takes nothing until sandboxes end.
 */
export const mem: Filter = ({ node, density }) => {
  const used = node.usage.quotaMemUsedMiB;
  if (used + density.footprintMiB > density.memQuotaMiB + 1e-9) {
    const held = Math.floor(used / density.footprintMiB + 1e-9);
    return `mem ${held}/${density.paperCeiling} (${fmt(used)}+${fmt(density.footprintMiB)} > ${fmt(density.memQuotaMiB)} MiB)`;
  }
  const reserve = node.capacity.memoryMiB - density.memBudgetMiB;
  if (node.capacity.declared === false && node.usage.memAvailableMiB < reserve) return `memory available ${fmt(node.usage.memAvailableMiB)} MiB < reserve ${fmt(reserve)} MiB`;
  return undefined;
};
