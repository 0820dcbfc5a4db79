import { headroomScore, type Scorer } from '../plugin.js';

export const mvmNum: Scorer = ({ node, cfg }) => headroomScore(node.sandboxes.total, cfg.scheduler.node_max_mvm_num);
