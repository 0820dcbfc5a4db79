// The view tabs, or the `:` command / `/` filter being typed. k9s-style: one line.
import React from 'react';
import { Text } from 'ink';
import { cut } from '../src/tui/format.js';
import { useConsole } from '../src/tui/react.js';
import { colorOf } from '../src/tui/skins.js';
import { VIEWS, type ViewName } from '../src/tui/views.js';

/** The other views' names when the filter in force needs the room: each one a `:` word that picks it (resolveView). */
const SHORT: Record<ViewName, string> = {
  nodes: 'node',
  sandboxes: 'sb',
  pool: 'pool',
  events: 'ev',
  config: 'cfg',
  triage: 'tri',
  templates: 'tpl',
  snapshots: 'snap',
  keys: 'keys',
};

const tabsOf = (view: ViewName, names: 'full' | 'short' | 'numbers'): string[] =>
  VIEWS.map((v, i) => `${i === 0 ? '' : ' '}${i + 1}${v === view || names === 'full' ? `:${v}` : names === 'short' ? `:${SHORT[v]}` : ''}`);

/**
 * The tabs and the filter tail that fit `width`, the filter in force never the part that goes:
 * first its `(esc clears)` hint, then the other views' names get shorter, then only their number
 * keys are left (the current view keeps its name); past that the tabs are cut, then the filter.
 * Without a filter the same steps fit the tabs alone (nine views' full names need 86 columns).
 */
export function commandBarParts(view: ViewName, filter: string | undefined, width: number): { tabs: string[]; tail: string } {
  const hint = filter ? `  filter: /${filter}` : '';
  const tries = [
    ...(filter ? [{ tabs: tabsOf(view, 'full'), tail: `${hint}  (esc clears)` }] : []),
    { tabs: tabsOf(view, 'full'), tail: hint },
    { tabs: tabsOf(view, 'short'), tail: hint },
    { tabs: tabsOf(view, 'numbers'), tail: hint },
  ];
  return tries.find((t) => t.tabs.join('').length + t.tail.length <= width) ?? tries[tries.length - 1]!;
}

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
  const parts = commandBarParts(view, filter, width);
  // Past the last step the filter keeps its room and the tabs are cut.
  const room = Math.max(0, width - parts.tail.length);
  let used = 0;
  const tabs = parts.tabs.map((t, i) => {
    const v = VIEWS[i]!;
    const text = cut(t, room - used);
    used += text.length;
    return (
      <Text key={v} inverse={v === view} color={v === view ? colorOf(skin, 'accent') : colorOf(skin, 'dim')}>
        {text}
      </Text>
    );
  });
  return (
    <Text wrap="truncate">
      {tabs}
      {cut(parts.tail, width - used)}
    </Text>
  );
}
