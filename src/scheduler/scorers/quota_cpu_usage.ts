import { headroomScore, type Scorer } from '../plugin.js';

export const quotaCpuUsage: Scorer = ({ node, density }) => headroomScore(node.quotaCpuUsed, density.cpuQuota);
