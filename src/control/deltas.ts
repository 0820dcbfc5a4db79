// What changed since it was last sent: the watch stream sends each node and sandbox again only
// when its serialized form differs from what went out before.

/** Calls `changed` for entries whose key is new or different and `removed` for those gone; updates `seen`. */
export function diff<T>(seen: Map<string, string>, now: [string, T, string][], changed: (v: T) => void, removed: (id: string) => void): void {
  const ids = new Set<string>();
  for (const [id, v, key] of now) {
    ids.add(id);
    if (seen.get(id) !== key) {
      seen.set(id, key);
      changed(v);
    }
  }
  for (const id of [...seen.keys()]) {
    if (ids.has(id)) continue;
    seen.delete(id);
    removed(id);
  }
}
