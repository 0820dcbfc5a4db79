import React from 'react';
import { describe, expect, it } from 'vitest';
import { render } from 'ink-testing-library';
import { pickSkin } from '../src/tui/skins.js';
import { Prompt, PROMPT_HEIGHT } from './Prompt.js';

describe('Prompt', () => {
  it('shows the value with a cursor and the validation of that value', () => {
    const p = {
      kind: 'prompt' as const,
      title: 'ratio',
      value: '1.5',
      describe: (v: string) => ({ text: Number(v) > 1 ? 'must be between 0 and 1' : 'ok', valid: Number(v) <= 1 }),
      submit: async () => {},
    };
    const { lastFrame } = render(<Prompt prompt={p} width={100} skin={pickSkin('mono')} />);
    expect(lastFrame()!.split('\n')).toEqual(['ratio', '> 1.5_', 'must be between 0 and 1', 'enter: apply   esc: cancel   ctrl-u: clear']);
    expect(lastFrame()!.split('\n')).toHaveLength(PROMPT_HEIGHT);
  });
});
