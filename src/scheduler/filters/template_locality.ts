import type { Filter } from '../plugin.js';

/**
 * The node holds the template, or (cluster) it is on another node and this node fetches what it
 * lacks (NodeView.layers: cubelet/layer-fetch.ts); the create then waits for the fetch there.
 */
export const templateLocality: Filter = ({ req, node }) => {
  if (node.templates.includes(req.templateID)) return undefined;
  if (req.fetchable && node.layers !== undefined) return undefined;
  return `template ${req.templateID} not on node${req.fetchable ? ', which fetches no templates' : ''}`;
};
