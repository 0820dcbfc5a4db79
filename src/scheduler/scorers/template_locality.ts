import { holds, type Scorer } from '../plugin.js';
import { listedName } from '../../model/template.js';

/**
 * Prefers the nodes that hold the template (100: nothing to fetch), then those fetching it already
 * (50: a create there waits for a fetch under way), then the rest (0: a create there fetches it).
 */
export const templateLocality: Scorer = ({ req, node }) => {
  if (holds(node, req.templateID)) return 100;
  const want = listedName(req.templateID);
  return node.fetching?.some((f) => listedName(f.split(' ', 1)[0]!) === want) ? 50 : 0;
};
