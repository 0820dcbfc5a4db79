// The view tabs, or the `:` command / `/` filter being typed. k9s-style: one line.
import React from 'react';
import { Text } from 'ink';
import { cut } from '../src/tui/format.js';
import { useConsole } from '../src/tui/react.js';
import { colorOf } from '../src/tui/skins.js';
import { VIEWS } from '../src/tui/views.js';

export function CommandBar({ width }: { width: number }) {
  const view = useConsole((s) => s.ui.view);
  const overlay = useConsole((s) => s.ui.overlay);
  const filter = useConsole((s) => s.ui.filter[s.ui.view]);
  const skin = useConsole((s) => s.settings.skin);
  if (overlay?.kind === 'command' || overlay?.kind === 'filter') {
    const sigil = overlay.kind === 'command' ? ':' : '/';
    return (
      <Text color={colorOf(skin, 'accent')} wrap="truncate">
        {cut(`${sigil}${overlay.text}_`, width)}
      </Text>
    );
  }
  let left = width;
  const tabs = VIEWS.map((v, i) => {
    const text = cut(`${i === 0 ? '' : ' '}${i + 1}:${v}`, left);
    left -= text.length;
    return (
      <Text key={v} inverse={v === view} color={v === view ? colorOf(skin, 'accent') : colorOf(skin, 'dim')}>
        {text}
      </Text>
    );
  });
  const tail = filter ? cut(`  filter: /${filter}  (esc clears)`, left) : '';
  return (
    <Text wrap="truncate">
      {tabs}
      {tail}
    </Text>
  );
}
