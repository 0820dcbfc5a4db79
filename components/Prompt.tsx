// An inline edit (release ratio, launch spec): the value with a cursor and, under it, the
// validation or preview recomputed on each key.
import React from 'react';
import { Box, Text } from 'ink';
import { cut } from '../src/tui/format.js';
import { colorOf, type Skin } from '../src/tui/skins.js';
import type { Prompt as PromptState } from '../src/tui/store.js';

export const PROMPT_HEIGHT = 4;

export function Prompt({ prompt, width, skin }: { prompt: PromptState; width: number; skin: Skin }) {
  const d = prompt.describe(prompt.value);
  return (
    <Box flexDirection="column">
      <Text bold color={colorOf(skin, 'accent')}>
        {cut(prompt.title, width)}
      </Text>
      <Text>{cut(`> ${prompt.value}_`, width)}</Text>
      <Text color={colorOf(skin, d.valid ? 'ok' : 'bad')}>{cut(d.text, width)}</Text>
      <Text color={colorOf(skin, 'dim')}>{cut('enter: apply   esc: cancel   ctrl-u: clear', width)}</Text>
    </Box>
  );
}
