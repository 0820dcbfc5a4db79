import { fmt, type Filter } from '../plugin.js';

/**
 * The oversold memory budget ((memory - reserved) x mem_oversell_ratio) must hold one more
 * footprint (memory + overhead). quotaMemUsedMiB already counts paused sandboxes at (1 - r).
 * The reason reads as sandboxes of the requested spec: "mem 117/117 (...)".
 */
export const mem: Filter = ({ node, density }) => {
  const used = node.usage.quotaMemUsedMiB;
  if (used + density.footprintMiB <= density.memQuotaMiB + 1e-9) return undefined;
  const held = Math.floor(used / density.footprintMiB + 1e-9);
  return `mem ${held}/${density.paperCeiling} (${fmt(used)}+${fmt(density.footprintMiB)} > ${fmt(density.memQuotaMiB)} MiB)`;
};
