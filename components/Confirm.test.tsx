import React from 'react';
import { describe, expect, it } from 'vitest';
import { render } from 'ink-testing-library';
import { pickSkin } from '../src/tui/skins.js';
import { Confirm, confirmHeight } from './Confirm.js';

describe('Confirm', () => {
  it('asks the question with what will happen and how to answer', () => {
    const c = {
      kind: 'confirm' as const,
      title: 'Drain node node-a?',
      lines: ['It stops taking sandboxes; 3 sandbox(es) on it finish or are moved.'],
      run: async () => {},
    };
    const { lastFrame } = render(<Confirm confirm={c} width={100} skin={pickSkin('mono')} />);
    expect(lastFrame()!.split('\n')).toEqual([
      'Drain node node-a?',
      '  It stops taking sandboxes; 3 sandbox(es) on it finish or are moved.',
      'y/enter: yes   n/esc: no',
    ]);
    expect(confirmHeight(c)).toBe(3);
  });
});
