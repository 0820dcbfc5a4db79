import type { Filter } from '../plugin.js';

export const templateLocality: Filter = ({ req, node }) =>
  node.templates.includes(req.templateID) ? undefined : `template ${req.templateID} not on node`;
