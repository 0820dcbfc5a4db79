// WatchDir by polling: the node offers listings, not inotify across the sandbox boundary,
// so changes are found by comparing two listings. Pure.
import type { FileStat } from '../../runtime/types.js';
import { EventType } from './gen/filesystem/filesystem_pb.js';

export interface WatchEvent {
  /** Relative to the watched directory, as envd reports it. */
  name: string;
  type: EventType;
}

export interface Listing {
  /** path → mtime ms and size, enough to see writes. */
  entries: Map<string, { mtimeMs: number; size: number }>;
}

export function listingOf(stats: FileStat[]): Listing {
  return { entries: new Map(stats.map((s) => [s.path, { mtimeMs: s.mtime.getTime(), size: s.size }])) };
}

/** Events between two listings of `dir`, names relative to it, sorted by name. */
export function diffListings(dir: string, before: Listing, after: Listing): WatchEvent[] {
  const prefix = dir.endsWith('/') ? dir : `${dir}/`;
  const rel = (p: string): string => (p.startsWith(prefix) ? p.slice(prefix.length) : p);
  const out: WatchEvent[] = [];
  for (const [p, a] of after.entries) {
    const b = before.entries.get(p);
    if (!b) out.push({ name: rel(p), type: EventType.CREATE });
    else if (b.mtimeMs !== a.mtimeMs || b.size !== a.size) out.push({ name: rel(p), type: EventType.WRITE });
  }
  for (const p of before.entries.keys()) if (!after.entries.has(p)) out.push({ name: rel(p), type: EventType.REMOVE });
  return out.sort((x, y) => (x.name < y.name ? -1 : x.name > y.name ? 1 : 0));
}
