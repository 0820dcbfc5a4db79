import type { Filter } from '../plugin.js';

/** node_max_mvm_num counts every sandbox on the node, paused ones included. */
export const mvmNum: Filter = {
  passes: ({ node, cfg }) => !(node.sandboxes >= cfg.scheduler.node_max_mvm_num),
  reason: ({ node, cfg }) => {
    const max = cfg.scheduler.node_max_mvm_num;
    return node.sandboxes >= max ? `sandboxes ${node.sandboxes} >= ${max}` : undefined;
  },
};
