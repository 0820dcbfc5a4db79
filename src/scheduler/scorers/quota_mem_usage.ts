import { headroomScore, type Scorer } from '../plugin.js';

export const quotaMemUsage: Scorer = ({ node, density }) => headroomScore(node.quotaMemUsedMiB, density.memQuotaMiB);
