// Two lines an SRE reads first: where we are connected and whether the data is live, then
// the cluster totals, the create rate and p99 of the last minute, the release ratio, the config version.
import React, { useMemo } from 'react';
import { Box, Text } from 'ink';
import { cut, millis, ratio, shortDuration } from '../src/tui/format.js';
import { releaseRatioOf } from '../src/tui/model.js';
import { useConsole, useNow } from '../src/tui/react.js';
import { colorOf } from '../src/tui/skins.js';
import type { Connection } from '../src/tui/store.js';
import type { ConfigView, StatsView } from '../src/api/types.js';

export function connectionText(c: Connection, now: number): string {
  if (c.state === 'live') return 'LIVE';
  if (c.state === 'connecting') return c.attempt ? `CONNECTING (retry ${c.attempt}: ${c.error})` : 'CONNECTING';
  return `STALE ${shortDuration(now - c.since)} (retry ${c.attempt}: ${c.error})`;
}

/** The line a rejected config file gets until it is fixed (the old version stays in force), or null. */
export function rejectedText(config: ConfigView | null): string | null {
  const r = config?.rejected;
  if (!r) return null;
  return `CONFIG ON DISK REJECTED (v${config.version} stays, since ${r.at.slice(11, 19)}): ${r.errors.map((e) => `${e.path}: ${e.message}`).join('; ')}`;
}

/** The first of `forms` (longest first) that fits `width`, else the last cut to it. */
export function firstFitting(forms: readonly string[], width: number): string {
  return forms.find((f) => f.length <= width) ?? cut(forms[forms.length - 1]!, Math.max(0, width));
}

/**
 * The first line's tail, whole and then shorter: config version and ratio are what a decision
 * needs, the API URL is on the screen the operator started from, so at 80 columns it goes last.
 */
export function headerRight(url: string, version: number | undefined, r: number | null): string[] {
  const cfg = `config v${version ?? '-'}  release ratio ${r === null ? '-' : ratio(r)}`;
  return [`  ${url}  ${cfg}`, `  ${cfg}  ${url}`];
}

/**
 * The totals line, whole and then in shorter words, so the create p99 is never the part cut:
 * at 80 columns the whole line was 86 characters and lost `p99` (tmux, issue 16).
 */
export function headerTotals(t: { nodes: number; schedulable: number; running: number; paused: number; creating: number }, stats: StatsView | null): string[] {
  // No create in the minute: no p99 to show (it read `p99 0ms`, a latency nobody measured).
  const p99 = (x: StatsView) => (x.createsLastMinute > 0 ? millis(x.createP99Ms) : '-');
  const creates = (perSec: boolean) =>
    stats ? `creates ${stats.createsLastMinute}/min${perSec ? ` ${stats.createRatePerSec.toFixed(2)}/s` : ''} p99 ${p99(stats)}` : 'creates -';
  // Creates in progress count as sandboxes too (a burst showed 0 while 20 were being made).
  const mk = (long: boolean) => (t.creating ? ` ${t.creating} ${long ? 'creating' : 'new'}` : '');
  return [
    `nodes ${t.nodes} (${t.schedulable} schedulable)  sandboxes ${t.running} running ${t.paused} paused${mk(true)}  ${creates(true)}`,
    `nodes ${t.nodes} (${t.schedulable} schedulable)  sandboxes ${t.running} run ${t.paused} paused${mk(true)}  ${creates(false)}`,
    `${creates(false)}  nodes ${t.nodes} (${t.schedulable} sched)  ${t.running} run ${t.paused} paused${mk(false)}`,
  ];
}

/** Lines the header takes: two, and one more while the config on disk is rejected. */
export const headerHeight = (config: ConfigView | null): number => (config?.rejected ? 3 : 2);

export function Header({ width }: { width: number }) {
  const nodes = useConsole((s) => s.data.nodes);
  const stats = useConsole((s) => s.data.stats);
  const config = useConsole((s) => s.data.config);
  const conn = useConsole((s) => s.conn);
  const { apiUrl, readonly, skin } = useConsole((s) => s.settings);
  // Only a stale stream needs a clock (its age); a live one repaints on data.
  const now = useNow(1000, conn.state !== 'live');
  const totals = useMemo(() => {
    const t = { nodes: 0, schedulable: 0, running: 0, paused: 0, creating: 0 };
    for (const n of Object.values(nodes)) {
      t.nodes++;
      if (n.schedulable) t.schedulable++;
      t.running += n.sandboxes.running;
      t.paused += n.sandboxes.paused;
      t.creating += n.sandboxes.creating;
    }
    return t;
  }, [nodes]);
  const r = releaseRatioOf(config);
  // The connection state leads: on a narrow terminal the tail is what gets cut.
  const connText = connectionText(conn, now);
  const right = firstFitting(headerRight(apiUrl + (readonly ? ' [RO]' : ''), config?.version, r), width - connText.length);
  const line2 = firstFitting(headerTotals(totals, stats), width);
  return (
    <Box flexDirection="column">
      <Text wrap="truncate">
        <Text bold color={colorOf(skin, conn.state === 'live' ? 'ok' : 'bad')}>
          {cut(connText, width)}
        </Text>
        <Text bold color={colorOf(skin, 'title')}>
          {cut(right, Math.max(0, width - connText.length))}
        </Text>
      </Text>
      <Text wrap="truncate">{cut(line2, width)}</Text>
      {config?.rejected && (
        <Text bold color={colorOf(skin, 'bad')} wrap="truncate">
          {cut(rejectedText(config)!, width)}
        </Text>
      )}
    </Box>
  );
}
