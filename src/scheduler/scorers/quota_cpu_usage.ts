import { headroomScore, type Scorer } from '../plugin.js';

export const quotaCpuUsage: Scorer = ({ node, density }) => headroomScore(node.usage.quotaCpuUsed, density.cpuQuota);
