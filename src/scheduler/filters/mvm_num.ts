import type { Filter } from '../plugin.js';

/** node_max_mvm_num counts every sandbox on the node, paused ones included. */
export const mvmNum: Filter = ({ node, cfg }) => {
  const max = cfg.scheduler.node_max_mvm_num;
  return node.sandboxes.total >= max ? `sandboxes ${node.sandboxes.total} >= ${max}` : undefined;
};
