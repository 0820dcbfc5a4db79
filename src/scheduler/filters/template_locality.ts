import { holds, type Filter, type NodeContext } from '../plugin.js';

const takes = ({ req, node }: NodeContext) => holds(node, req.templateID) || (req.fetchable === true && node.fetches);

/**
 * The node holds the template, or (cluster) it is on another node and this node fetches what it
 * lacks (NodeView.layers: templates/fetch.ts); the create then waits for the fetch there.
 */
export const templateLocality: Filter = {
  passes: takes,
  reason: (ctx) => (takes(ctx) ? undefined : `template ${ctx.req.templateID} not on node${ctx.req.fetchable ? ', which fetches no templates' : ''}`),
};
