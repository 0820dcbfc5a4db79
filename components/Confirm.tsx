// A yes/no question before a dangerous action; only y or enter confirms (or the one
// alternative the dialog offers, named in its hint line).
import React from 'react';
import { Box, Text } from 'ink';
import { cut } from '../src/tui/format.js';
import { colorOf, type Skin } from '../src/tui/skins.js';
import type { Confirm as ConfirmState } from '../src/tui/store.js';

export function confirmHeight(c: ConfirmState): number {
  return 2 + c.lines.length;
}

export function Confirm({ confirm, width, skin }: { confirm: ConfirmState; width: number; skin: Skin }) {
  return (
    <Box flexDirection="column">
      <Text bold color={colorOf(skin, 'warn')}>
        {cut(confirm.title, width)}
      </Text>
      {confirm.lines.map((l, i) => (
        <Text key={i}>{cut(`  ${l}`, width)}</Text>
      ))}
      <Text color={colorOf(skin, 'dim')}>{cut(`y/enter: yes   ${confirm.alt ? `${confirm.alt.key}: ${confirm.alt.label}   ` : ''}n/esc: no`, width)}</Text>
    </Box>
  );
}
