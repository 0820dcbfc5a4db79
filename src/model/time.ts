// Times in the model are epoch milliseconds; the API writes them as ISO 8601 on its wires
// (src/api/e2b/wire.ts, src/api/admin/wire.ts). The versions before wrote ISO 8601 inside too
// (stores, files, node RPC, heartbeats): what they wrote is read through these.

/** A time as epoch ms, from epoch ms or from the ISO 8601 an older version wrote (NaN when it is neither). */
export const epochMs = (t: number | string): number => (typeof t === 'number' ? t : Date.parse(t));

/** The same for an optional time. */
export const epochMsOpt = (t: number | string | undefined): number | undefined => (t === undefined ? undefined : epochMs(t));

/** An epoch ms time as the wires write it. */
export const isoTime = (t: number): string => new Date(t).toISOString();

let lastStamp = 0;

/**
 * Now in epoch ms, strictly later than every stamp this process took before (integers, ahead of
 * the wall clock only while more than one is taken in a millisecond). For "before or after" that
 * must be exact within one process: a node's view of its sandboxes against the creates and
 * destroys sent to it (control/cluster/node-views.ts PlacementBook). With Date.now() on both
 * sides a burst of creates sent in the millisecond of a view that counted them was counted twice:
 * 15 at once, refusing creates on a node with room (`cpu quota 32+1 > 25.6`, 4 creates in 30,000
 * at c=20, cubectl bench, role all).
 */
export function stamp(): number {
  lastStamp = Math.max(Date.now(), lastStamp + 1);
  return lastStamp;
}
