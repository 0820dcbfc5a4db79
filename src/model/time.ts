// Times in the model are epoch milliseconds; the API writes them as ISO 8601 on its wires
// (src/api/e2b/wire.ts, src/api/admin/wire.ts). The versions before wrote ISO 8601 inside too
// (stores, files, node RPC, heartbeats): what they wrote is read through these.

/** A time as epoch ms, from epoch ms or from the ISO 8601 an older version wrote (NaN when it is neither). */
export const epochMs = (t: number | string): number => (typeof t === 'number' ? t : Date.parse(t));

/** The same for an optional time. */
export const epochMsOpt = (t: number | string | undefined): number | undefined => (t === undefined ? undefined : epochMs(t));

/** An epoch ms time as the wires write it. */
export const isoTime = (t: number): string => new Date(t).toISOString();
