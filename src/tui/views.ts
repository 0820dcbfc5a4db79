// The console's views, in tab and number-key order.
export const VIEWS = ['nodes', 'sandboxes', 'pool', 'events', 'config', 'triage', 'templates', 'snapshots', 'keys'] as const;
export type ViewName = (typeof VIEWS)[number];

export function isView(s: string): s is ViewName {
  return (VIEWS as readonly string[]).includes(s);
}

const ALIASES: Record<string, ViewName> = { sb: 'sandboxes', sbx: 'sandboxes', cfg: 'config', nic: 'pool', tpl: 'templates', snap: 'snapshots' };

/** `:sb`, `:node`, `:ev` work as in k9s: an alias, a unique prefix or a singular picks the view. */
export function resolveView(word: string): ViewName | null {
  const w = word.trim().toLowerCase();
  if (!w) return null;
  if (isView(w)) return w;
  if (ALIASES[w]) return ALIASES[w];
  const hits = VIEWS.filter((v) => v.startsWith(w) || `${w}s` === v);
  return hits.length === 1 ? hits[0]! : null;
}
