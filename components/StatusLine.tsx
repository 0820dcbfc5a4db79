// The flash line (outcome of the last action, with its detail lines: config diff,
// validation errors, new density) or, when there is none, the key hints.
import React from 'react';
import { Box, Text } from 'ink';
import { cut, wrap } from '../src/tui/format.js';
import { hintLine } from '../src/tui/keymap.js';
import { useConsole } from '../src/tui/react.js';
import { colorOf } from '../src/tui/skins.js';
import type { Flash } from '../src/tui/store.js';

/** Detail lines shown at most (the body gives up this much height while a flash has detail). */
export const MAX_DETAIL = 4;
/** The outcome itself wraps on up to this many lines (a 130597 names every node and rule). */
export const MAX_TEXT_LINES = 3;

/** The outcome wrapped to the width, then its detail lines (each cut, at most MAX_DETAIL). */
export function flashLines(flash: Flash, width: number): { text: string[]; detail: string[] } {
  const detail =
    flash.detail.length > MAX_DETAIL ? flash.detail.slice(0, MAX_DETAIL - 1).concat(`... ${flash.detail.length - MAX_DETAIL + 1} more`) : flash.detail;
  return { text: wrap(flash.text, width, MAX_TEXT_LINES), detail };
}

export function statusHeight(flash: Flash | null, busy: boolean, width: number): number {
  if (busy || !flash) return 1;
  const l = flashLines(flash, width);
  return l.text.length + l.detail.length;
}

export function StatusLine({ width }: { width: number }) {
  const flash = useConsole((s) => s.ui.flash);
  const busy = useConsole((s) => s.ui.busy);
  const readonly = useConsole((s) => s.settings.readonly);
  const view = useConsole((s) => s.ui.view);
  const skin = useConsole((s) => s.settings.skin);
  if (busy) return <Text color={colorOf(skin, 'accent')}>{cut(`${busy} ...`, width)}</Text>;
  if (!flash) {
    return <Text color={colorOf(skin, 'dim')}>{hintLine(view, readonly, width)}</Text>;
  }
  const { text, detail } = flashLines(flash, width);
  return (
    <Box flexDirection="column">
      {text.map((t, i) => (
        <Text key={`t${i}`} color={colorOf(skin, flash.level)}>
          {t}
        </Text>
      ))}
      {detail.map((d, i) => (
        <Text key={i}>{cut(`  ${d}`, width)}</Text>
      ))}
    </Box>
  );
}
