// Two lines an SRE reads first: where we are connected and whether the data is live, then
// the cluster totals, the create rate and p99 of the last minute, the release ratio, the config version.
import React, { useMemo } from 'react';
import { Box, Text } from 'ink';
import { cut, millis, ratio, shortDuration } from '../src/tui/format.js';
import { releaseRatioOf } from '../src/tui/model.js';
import { useConsole, useNow } from '../src/tui/react.js';
import { colorOf } from '../src/tui/skins.js';
import type { Connection } from '../src/tui/store.js';
import type { ConfigView } from '../src/api/types.js';

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
    const t = { nodes: 0, schedulable: 0, running: 0, paused: 0 };
    for (const n of Object.values(nodes)) {
      t.nodes++;
      if (n.schedulable) t.schedulable++;
      t.running += n.sandboxes.running;
      t.paused += n.sandboxes.paused;
    }
    return t;
  }, [nodes]);
  const r = releaseRatioOf(config);
  // The connection state leads: on a narrow terminal the tail is what gets cut.
  const connText = connectionText(conn, now);
  const right = `  ${apiUrl}${readonly ? ' [RO]' : ''}  config v${config?.version ?? '-'}  release ratio ${r === null ? '-' : ratio(r)}`;
  const line2 = [
    `nodes ${totals.nodes} (${totals.schedulable} schedulable)`,
    `sandboxes ${totals.running} running ${totals.paused} paused`,
    stats ? `creates ${stats.createsLastMinute}/min ${stats.createRatePerSec.toFixed(2)}/s p99 ${millis(stats.createP99Ms)}` : 'creates -',
  ].join('  ');
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
