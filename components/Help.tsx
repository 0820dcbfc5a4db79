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

export function Help({ height, width }: { height: number; width: number }) {
  const readonly = useConsole((s) => s.settings.readonly);
  const skin = useConsole((s) => s.settings.skin);
  const h = Math.max(1, height - 1);
  const lines = helpLines(readonly);
  const cols = Math.ceil(lines.length / h);
  const colWidth = Math.floor(width / cols);
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
