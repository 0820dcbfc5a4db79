// The help screen, generated from the keymap (so --readonly hides exactly what it does not
// bind): one column, descriptions wrapped under their own column, scrolled with the
// navigation keys (at 80x24 it is longer than the screen).
import React, { useMemo } from 'react';
import { fit } from '../src/tui/format.js';
import { helpSections } from '../src/tui/keymap.js';
import { useConsole } from '../src/tui/react.js';
import { Pane } from './Pane.js';

const KEYS_WIDTH = 16;

/** Section titles, then `keys  what` rows (the Pane wraps them under the description column). */
export function helpLines(readonly: boolean): string[] {
  return helpSections(readonly).flatMap((s, i) => [...(i > 0 ? [''] : []), s.title, ...s.rows.map((r) => `${fit(r.keys, KEYS_WIDTH)} ${r.help}`)]);
}

export function Help({ height, width, offset, onMax }: { height: number; width: number; offset: number; onMax?: (max: number) => void }) {
  const readonly = useConsole((s) => s.settings.readonly);
  const skin = useConsole((s) => s.settings.skin);
  const lines = useMemo(() => helpLines(readonly), [readonly]);
  return (
    <Pane
      title={`Keys${readonly ? ' (read-only: actions are not bound)' : ''}`}
      lines={lines}
      hang={KEYS_WIDTH + 1}
      offset={offset}
      height={height}
      width={width}
      skin={skin}
      {...(onMax ? { onMax } : {})}
    />
  );
}
