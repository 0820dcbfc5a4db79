// The flash line (outcome of the last action, with its detail lines: config diff,
// validation errors, new density) or, when there is none, the key hints.
import React from 'react';
import { Box, Text } from 'ink';
import { cut } from '../src/tui/format.js';
import { hintLine } from '../src/tui/keymap.js';
import { useConsole } from '../src/tui/react.js';
import { colorOf } from '../src/tui/skins.js';

/** Detail lines shown at most (the body gives up this much height while a flash has detail). */
export const MAX_DETAIL = 4;

export function statusHeight(detail: number): number {
  return 1 + Math.min(MAX_DETAIL, detail);
}

export function StatusLine({ width }: { width: number }) {
  const flash = useConsole((s) => s.ui.flash);
  const busy = useConsole((s) => s.ui.busy);
  const readonly = useConsole((s) => s.settings.readonly);
  const view = useConsole((s) => s.ui.view);
  const skin = useConsole((s) => s.settings.skin);
  if (busy) return <Text color={colorOf(skin, 'accent')}>{cut(`${busy} ...`, width)}</Text>;
  if (!flash) {
    return <Text color={colorOf(skin, 'dim')}>{cut(hintLine(view, readonly), width)}</Text>;
  }
  const extra = flash.detail.length > MAX_DETAIL ? flash.detail.slice(0, MAX_DETAIL - 1).concat(`... ${flash.detail.length - MAX_DETAIL + 1} more`) : flash.detail;
  return (
    <Box flexDirection="column">
      <Text color={colorOf(skin, flash.level)}>{cut(flash.text, width)}</Text>
      {extra.map((d, i) => (
        <Text key={i}>{cut(`  ${d}`, width)}</Text>
      ))}
    </Box>
  );
}
