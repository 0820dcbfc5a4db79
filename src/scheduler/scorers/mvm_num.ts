import { headroomScore, type Scorer } from '../plugin.js';

export const mvmNum: Scorer = ({ node, cfg }) => headroomScore(node.sandboxes, cfg.scheduler.node_max_mvm_num);
