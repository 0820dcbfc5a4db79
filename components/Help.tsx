// The help screen, generated from the keymap (so --readonly hides exactly what it does not
// bind). Sections flow into as many columns as the height needs.
import React from 'react';
import { Box, Text } from 'ink';
import { cut, fit } from '../src/tui/format.js';
import { helpSections } from '../src/tui/keymap.js';
import { useConsole } from '../src/tui/react.js';
import { colorOf } from '../src/tui/skins.js';

interface Line {
  text: string;
  title: boolean;
}

export function helpLines(readonly: boolean): Line[] {
  return helpSections(readonly).flatMap((s, i) => [
    ...(i > 0 ? [{ text: '', title: false }] : []),
    { text: s.title, title: true },
    ...s.rows.map((r) => ({ text: `${fit(r.keys, 16)} ${r.help}`, title: false })),
  ]);
}

const KEYS_WIDTH = 17;

/** Long descriptions continue on the next lines under their own column, never cut. */
export function wrapHelp(lines: Line[], width: number): Line[] {
  const room = width - KEYS_WIDTH;
  if (room < 10) return lines;
  return lines.flatMap((l) => {
    if (l.title || l.text.length <= width) return [l];
    const out: Line[] = [];
    let row = l.text.slice(0, KEYS_WIDTH);
    for (const word of l.text.slice(KEYS_WIDTH).split(' ')) {
      if (row.length > KEYS_WIDTH && row.length + 1 + word.length > width) {
        out.push({ text: row, title: false });
        row = ' '.repeat(KEYS_WIDTH);
      }
      row += row.length > KEYS_WIDTH ? ` ${word}` : word;
    }
    out.push({ text: row, title: false });
    return out;
  });
}

/** The fewest columns whose wrapped lines fit the height; past four, lines are cut instead. */
export function helpLayout(lines: Line[], height: number, width: number): { cols: number; colWidth: number; lines: Line[] } {
  for (let cols = 1; cols <= 4; cols++) {
    const colWidth = Math.floor(width / cols);
    const wrapped = wrapHelp(lines, colWidth - 1);
    if (Math.ceil(wrapped.length / cols) <= height) return { cols, colWidth, lines: wrapped };
  }
  const cols = Math.ceil(lines.length / height);
  return { cols, colWidth: Math.floor(width / cols), lines };
}

export function Help({ height, width }: { height: number; width: number }) {
  const readonly = useConsole((s) => s.settings.readonly);
  const skin = useConsole((s) => s.settings.skin);
  const h = Math.max(1, height - 1);
  const { cols, colWidth, lines } = helpLayout(helpLines(readonly), h, width);
  return (
    <Box flexDirection="column">
      <Text bold color={colorOf(skin, 'title')}>
        {cut(`Keys${readonly ? ' (read-only: actions are not bound)' : ''}   esc or ? closes`, width)}
      </Text>
      <Box flexDirection="row">
        {Array.from({ length: cols }, (_, c) => (
          <Box key={c} flexDirection="column" width={colWidth}>
            {lines.slice(c * h, (c + 1) * h).map((l, i) => (
              <Text key={i} bold={l.title} color={l.title ? colorOf(skin, 'accent') : undefined} wrap="truncate">
                {cut(l.text, colWidth - 1) || ' '}
              </Text>
            ))}
          </Box>
        ))}
      </Box>
    </Box>
  );
}
