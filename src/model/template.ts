// Template names as every layer reads them (pure): NAME[:TAG], NAME meaning NAME:latest. The
// scheduler matches a request against the names nodes list, the control plane resolves a
// create's template, the node and the template store check refs: one set of rules.

const NAME_RE = /^[a-z0-9][a-z0-9._-]{0,62}$/;
const TAG_RE = /^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$/;
export const DEFAULT_TAG = 'latest';
/** The template every node has: the host's own userland, read-only. */
export const HOST_TEMPLATE = 'host';

/** NAME[:TAG] -> its parts, or what is wrong with it. */
export function splitTemplateRef(ref: string): { name: string; tag: string; ref: string } | { problem: string } {
  const i = ref.lastIndexOf(':');
  const name = i < 0 ? ref : ref.slice(0, i);
  const tag = i < 0 ? DEFAULT_TAG : ref.slice(i + 1);
  if (!NAME_RE.test(name)) return { problem: `template name '${name}' must match ${NAME_RE}` };
  if (!TAG_RE.test(tag)) return { problem: `template tag '${tag}' must match ${TAG_RE}` };
  return { name, tag, ref: `${name}:${tag}` };
}

/** Whether a sandbox's templateID names the template `ref` (NAME means NAME:latest). */
export function sameTemplate(templateID: string, ref: string): boolean {
  const r = splitTemplateRef(templateID);
  return 'ref' in r && r.ref === ref;
}

/** The name a template is listed and created by: NAME for the latest tag, else NAME:TAG. */
export function displayName(r: { name: string; tag: string }): string {
  return r.tag === DEFAULT_TAG ? r.name : `${r.name}:${r.tag}`;
}

/** The name a create or a lookup by NAME[:TAG] finds in the node's listing: `x:latest` is `x`. */
export function listedName(templateID: string): string {
  const r = splitTemplateRef(templateID);
  // Not a valid name: no template is listed under it, the 404 names it as given.
  return 'problem' in r ? templateID : displayName(r);
}
