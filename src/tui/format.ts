// Pure text helpers for the console: every cell is pre-formatted to a fixed width here,
// so the Table renders one string per row and Ink never wraps a line.
import type { NodeView, SandboxView } from '../api/types.js';

/** Pads or cuts `s` to exactly `width` columns (ASCII ids and numbers: one char = one column). */
export function fit(s: string, width: number, align: 'left' | 'right' = 'left'): string {
  if (width <= 0) return '';
  if (s.length > width) return s.slice(0, width);
  return align === 'left' ? s.padEnd(width) : s.padStart(width);
}

/** Cuts a line to the terminal width (no padding). */
export function cut(s: string, width: number): string {
  return s.length > width ? s.slice(0, Math.max(0, width)) : s;
}

/**
 * Word-wraps `s` to `width` columns in at most `maxLines` lines (a word longer than a line is
 * split); what does not fit ends the last line with `...`. Outcome messages and the selected
 * row's reason go through here so the decisive text is never cut at 80 columns.
 */
export function wrap(s: string, width: number, maxLines = Infinity): string[] {
  if (width <= 0 || maxLines <= 0) return [];
  const lines: string[] = [];
  let line = '';
  for (const word of s.split(/\s+/).filter(Boolean)) {
    let w = word;
    while (w.length > 0) {
      const room = line ? width - line.length - 1 : width;
      if (w.length <= room) {
        line = line ? `${line} ${w}` : w;
        w = '';
      } else if (line && w.length <= width) {
        lines.push(line);
        line = '';
      } else {
        const take = Math.max(1, room);
        lines.push(line ? `${line} ${w.slice(0, take)}` : w.slice(0, take));
        line = '';
        w = w.slice(take);
      }
    }
  }
  if (line || lines.length === 0) lines.push(line);
  if (lines.length <= maxLines) return lines;
  const kept = lines.slice(0, maxLines);
  const last = kept[maxLines - 1]!;
  kept[maxLines - 1] = last.length + 3 <= width ? `${last}...` : `${last.slice(0, Math.max(0, width - 3))}...`;
  return kept;
}

/** `95%` (whole points; the cpu filter's threshold is in whole points too). */
export function percent(n: number): string {
  return Number.isFinite(n) ? `${Math.round(n)}%` : '-';
}

/** Compact duration: 42s, 5m, 3h, 2d (largest unit only, as k9s AGE). */
export function shortDuration(ms: number): string {
  const s = Math.max(0, Math.floor(ms / 1000));
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m`;
  if (s < 86400) return `${Math.floor(s / 3600)}h`;
  return `${Math.floor(s / 86400)}d`;
}

/** Time left until `endAt`, with seconds under an hour (operators watch timeouts run out). */
export function timeLeft(endAt: string, now: number): string {
  const ms = Date.parse(endAt) - now;
  if (!Number.isFinite(ms)) return '-';
  if (ms <= 0) return 'expired';
  const s = Math.floor(ms / 1000);
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m${String(s % 60).padStart(2, '0')}s`;
  return shortDuration(ms);
}

export function age(startedAt: string, now: number): string {
  const t = Date.parse(startedAt);
  return Number.isFinite(t) ? shortDuration(now - t) : '-';
}

/** MiB as the operator reads it: 512Mi, 4.0Gi, 1.2Ti. */
export function mib(n: number): string {
  if (!Number.isFinite(n)) return '-';
  if (Math.abs(n) < 1024) return `${Math.round(n)}Mi`;
  if (Math.abs(n) < 1024 * 1024) return `${(n / 1024).toFixed(1)}Gi`;
  return `${(n / 1024 / 1024).toFixed(1)}Ti`;
}

/** The node's warm sandboxes ready of those wanted, over its templates: `1/2` ('-' with no warm pool). */
export function warmLevel(n: NodeView): string {
  const pools = Object.values(n.warm?.templates ?? {});
  if (!pools.length) return '-';
  return `${pools.reduce((a, p) => a + p.ready, 0)}/${pools.reduce((a, p) => a + p.target, 0)}`;
}

/** The node's warm pools whole: `warm pools code-interpreter 1/1 ready (0 starting), 12 hits 3 misses, holding 302Mi` ('' with none). */
export function warmPools(n: NodeView): string {
  const w = n.warm;
  if (!w) return '';
  const pools = Object.entries(w.templates).map(([t, p]) => `${t} ${p.ready}/${p.target} ready${p.starting ? ` (${p.starting} starting)` : ''}`);
  return `warm pools ${pools.join(', ') || 'none'}, ${w.hits} hits ${w.misses} misses, holding ${mib(w.footprintMiB)}`;
}

/** Free of size of the node's sandbox store: `12.3Gi/40.0Gi` ('-' on runtimes without one). */
export function storeFree(n: NodeView): string {
  const s = n.usage.store;
  return s ? `${mib(s.freeBytes / 2 ** 20)}/${mib(s.sizeBytes / 2 ** 20)}` : '-';
}

/** Disk quota the node's sandboxes hold of what its store may promise: `1.5/240Gi` ('-' on runtimes without a store or older nodes). */
export function diskQuota(n: NodeView): string {
  const used = n.usage.quotaDiskUsedGiB;
  const limit = n.density.diskQuotaGiB;
  return used === undefined || limit === undefined ? '-' : `${fmtGiB(used)}/${fmtGiB(limit)}Gi`;
}

const fmtGiB = (g: number): string => (Number.isInteger(g) ? String(g) : g.toFixed(1));

/** Bytes as the operator reads them: 512B, 12K, 3.4M, 1.2G (compact: a column's worth). */
export function bytes(n: number | undefined): string {
  if (n === undefined || !Number.isFinite(n)) return '-';
  const units = ['B', 'K', 'M', 'G', 'T'];
  let v = n;
  let i = 0;
  while (Math.abs(v) >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return i === 0 ? `${Math.round(v)}B` : `${v < 10 ? v.toFixed(1) : Math.round(v)}${units[i]}`;
}

/** A sandbox's live memory against its limit, `120Mi/256Mi` ('-' until polled). */
export function memUse(u: { memoryBytes: number; memoryLimitBytes: number } | undefined): string {
  return u ? `${mib(u.memoryBytes / 2 ** 20)}/${mib(u.memoryLimitBytes / 2 ** 20)}` : '-';
}

/** Network bytes received/sent, `1.2M/30K` ('-' where unknown). */
export function netUse(u: { netRxBytes?: number; netTxBytes?: number } | undefined): string {
  return u?.netRxBytes === undefined ? '-' : `${bytes(u.netRxBytes)}/${bytes(u.netTxBytes)}`;
}

/** Writable layer use of its limit: `1.2Gi/10Gi` ('-' until measured). */
export function diskUse(x: SandboxView): string {
  return x.diskUsedBytes === undefined ? `-/${x.spec.diskGiB}Gi` : `${mib(x.diskUsedBytes / 2 ** 20)}/${x.spec.diskGiB}Gi`;
}

export function millis(n: number): string {
  if (!Number.isFinite(n)) return '-';
  if (n < 1000) return `${Math.round(n)}ms`;
  return `${(n / 1000).toFixed(1)}s`;
}

export function ratio(n: number): string {
  return Number.isFinite(n) ? String(Math.round(n * 100) / 100) : '-';
}

export type Level = 'ok' | 'warn' | 'bad';

/** Density colour: green below the safety boundary, yellow up to the ceiling, red at it. */
export function densityLevel(live: number, safe: number, ceiling: number): Level {
  if (live >= ceiling) return 'bad';
  if (live >= safeBelow(safe, ceiling)) return 'warn';
  return 'ok';
}

/**
 * The memory safety boundary never reads above the ceiling: on a CPU-bound node the boundary
 * (memory without oversell) can exceed what the CPU quota admits at all.
 */
function safeBelow(safe: number, ceiling: number): number {
  return Math.min(safe, ceiling);
}

/** `86 / 117 (58 safe)` */
export function densityText(live: number, ceiling: number, safe: number): string {
  return `${live} / ${ceiling} (${safeBelow(safe, ceiling)} safe)`;
}

/** A fixed-width bar, `#` filled and `.` empty; over 100% stays full. */
export function gauge(value: number, max: number, width: number): string {
  if (width <= 0) return '';
  const share = max > 0 ? Math.min(1, Math.max(0, value / max)) : value > 0 ? 1 : 0;
  const filled = Math.round(share * width);
  return '#'.repeat(filled) + '.'.repeat(width - filled);
}

// ASCII, not block glyphs: every font and mono skin has them, and Ink measures non-ASCII
// text through a slow width path (block glyphs cost 6 ms per frame at 50 nodes, bench/tui-render.ts).
const SPARKS = ['_', '.', ':', '-', '=', '+', '*', '#'];

/** Sparkline of the last `width` values in 8 levels, scaled to their maximum (all-zero gives the floor). */
export function sparkline(values: readonly number[], width: number): string {
  const tail = values.slice(-width);
  const max = Math.max(0, ...tail);
  const chars = tail.map((v) => (max > 0 ? SPARKS[Math.min(7, Math.floor((Math.max(0, v) / max) * 7.999))]! : SPARKS[0]!));
  return chars.join('').padEnd(width);
}

/** A config value in one line for diffs and the config view. */
export function inline(v: unknown): string {
  if (v === undefined) return '-';
  if (typeof v === 'string') return v;
  return JSON.stringify(v);
}

/**
 * The runtimes a node offers, the default first (pure): "ns, microvm (emulated: tcg, pause frees
 * memory)". The release ratio is accounting only on a runtime without "pause frees memory".
 */
export function runtimesLabel(n: Pick<NodeView, 'runtime' | 'runtimes'>): string {
  return (n.runtimes ?? [{ name: n.runtime }])
    .map((r) => {
      const notes = [...(r.emulated ? ['emulated: tcg'] : []), ...(r.releaseBacked ? ['pause frees memory'] : [])];
      return notes.length ? `${r.name} (${notes.join(', ')})` : r.name;
    })
    .join(', ');
}
