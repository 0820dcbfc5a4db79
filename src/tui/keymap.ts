// The one keymap: dispatch, the help screen and docs/console.md are all generated from it.
// Dangerous bindings are simply not bound in --readonly (as k9s does), so they vanish
// from help and from dispatch together.
import type { Key } from 'ink';
import { EXEC_TIMEOUT_MS } from './actions.js';
import { EVENT_PAGE } from './model.js';
import { sortHelp } from './sorting.js';
import { VIEWS, type ViewName } from './views.js';

export type CommandId =
  | 'help'
  | 'quit'
  | 'command'
  | 'filter'
  | 'back'
  | 'up'
  | 'down'
  | 'pageUp'
  | 'pageDown'
  | 'top'
  | 'bottom'
  | 'nextView'
  | 'prevView'
  | `view:${ViewName}`
  | 'sort'
  | 'sortReverse'
  | 'wide'
  | 'panLeft'
  | 'panRight'
  | 'reconnect'
  | 'describe'
  | 'exec'
  | 'shell'
  | 'logs'
  | 'olderEvents'
  | 'mark'
  | 'editConfig'
  | 'reload'
  | 'releaseRatio'
  | 'cordon'
  | 'uncordon'
  | 'drain'
  | 'launch'
  | 'destroy'
  | 'pause';

export type Group = 'general' | 'navigation' | 'views' | 'actions';

export interface Binding {
  id: CommandId;
  /** Key names as keyName() produces them; the first is the one shown in hints. */
  keys: string[];
  help: string;
  /** Short label for the footer's key hints; absent = not hinted. */
  hint?: string;
  group: Group;
  /** Views where the key works; absent = everywhere. */
  views?: ViewName[];
  dangerous?: boolean;
}

const viewKeys: Binding[] = VIEWS.map((v, i) => ({ id: `view:${v}` as const, keys: [String(i + 1)], help: `${v} view (also :${v})`, group: 'views' as const }));

export const KEYMAP: readonly Binding[] = [
  { id: 'help', hint: 'help', keys: ['?'], help: 'this help', group: 'general' },
  { id: 'command', hint: 'command', keys: [':'], help: `command mode: ${VIEWS.map((v) => `:${v}`).join(' ')} :q (:q! too)`, group: 'general' },
  {
    id: 'filter',
    hint: 'filter',
    keys: ['/'],
    help: 'filter the rows of this view (substring, case-insensitive)',
    group: 'general',
    views: ['nodes', 'sandboxes', 'pool', 'events', 'config', 'templates', 'snapshots', 'keys'],
  },
  { id: 'back', keys: ['escape'], help: 'clear the filter / close a dialog', group: 'general' },
  { id: 'quit', hint: 'quit', keys: ['q', 'ctrl-c'], help: 'quit (restores the terminal)', group: 'general' },
  {
    id: 'reconnect',
    keys: ['ctrl-r'],
    help: 'reconnect now: while the header says STALE, try the daemon again without waiting for the next retry (every second), ending an attempt that hangs',
    group: 'general',
  },
  { id: 'up', keys: ['up', 'k'], help: 'previous row', group: 'navigation' },
  { id: 'down', keys: ['down', 'j'], help: 'next row', group: 'navigation' },
  { id: 'pageUp', keys: ['pageup', 'ctrl-b'], help: 'page up', group: 'navigation' },
  { id: 'pageDown', keys: ['pagedown', 'ctrl-f'], help: 'page down', group: 'navigation' },
  { id: 'top', keys: ['g', 'home'], help: 'first row', group: 'navigation' },
  { id: 'bottom', keys: ['G', 'end'], help: 'last row', group: 'navigation' },
  {
    id: 'sort',
    hint: 'sort',
    keys: ['s'],
    help: `sort by the next column, then back to the view's own order; the header marks it ^ (${sortHelp()})`,
    group: 'navigation',
  },
  { id: 'sortReverse', keys: ['S'], help: 'reverse the sort (the header marks it v)', group: 'navigation' },
  {
    id: 'wide',
    keys: ['w'],
    help: 'wide mode: every column, also those a narrow terminal leaves out (left/right pan over them); again to go back',
    group: 'navigation',
  },
  { id: 'panLeft', keys: ['left'], help: 'wide mode: show the columns to the left (the first column stays)', group: 'navigation' },
  { id: 'panRight', keys: ['right'], help: 'wide mode: show the columns to the right (the first column stays)', group: 'navigation' },
  { id: 'nextView', hint: 'view', keys: ['tab'], help: 'next view', group: 'views' },
  { id: 'prevView', keys: ['shift-tab'], help: 'previous view', group: 'views' },
  ...viewKeys,
  {
    id: 'describe',
    hint: 'describe',
    keys: ['enter'],
    help: 'describe the selected node or sandbox: quota, density, every scheduler rule, spec, egress, events (j/k scroll, esc closes)',
    group: 'actions',
    views: ['nodes', 'pool', 'triage', 'sandboxes'],
  },
  {
    id: 'exec',
    keys: ['x'],
    help: `run a command in the sandbox (sh -c, killed after ${EXEC_TIMEOUT_MS / 1000}s); from the table or its describe pane, where the output shows`,
    group: 'actions',
    views: ['sandboxes'],
    dangerous: true,
  },
  {
    id: 'shell',
    hint: 'shell',
    keys: ['a'],
    help: "a shell in the running sandbox (k9s's s, which sorts here): the console steps aside for a terminal in it (bash, else sh, as user) and comes back, redrawn, when the shell exits, the sandbox dies or the daemon goes away (the reason in the status line); from the table or its describe pane",
    group: 'actions',
    views: ['sandboxes'],
    dangerous: true,
  },
  {
    id: 'logs',
    keys: ['l'],
    help: "the sandbox's logs: its lifecycle from the daemon's whole event history and its processes' stdout/stderr, then following the output once a second while its describe pane is open (the last 1000 lines kept, control characters shown escaped); from the table or its describe pane",
    group: 'actions',
    views: ['sandboxes'],
  },
  {
    id: 'olderEvents',
    hint: 'older',
    keys: ['o'],
    help: `older events: the ${EVENT_PAGE} before the oldest shown, from the daemon's history (again for the page before; the selection goes to the first of them)`,
    group: 'actions',
    views: ['events'],
  },
  {
    id: 'mark',
    hint: 'mark',
    keys: ['space'],
    help: 'mark / unmark the sandbox (marked rows end in *, the header counts them) AND move to the next row; ctrl-d acts on all marked',
    group: 'actions',
    views: ['sandboxes'],
  },
  {
    id: 'editConfig',
    hint: 'edit',
    keys: ['e'],
    help: 'edit the selected live key (validated by the daemon, persisted with comments kept, applied live); restart keys are edited in the file',
    group: 'actions',
    views: ['config'],
    dangerous: true,
  },
  {
    id: 'reload',
    hint: 'reload',
    keys: ['R'],
    help: 'hot-reload the config files from disk (shows the diff or the validation error)',
    group: 'actions',
    dangerous: true,
  },
  {
    id: 'releaseRatio',
    hint: 'ratio',
    keys: ['r'],
    help: 'edit paused_resource_release_ratio (0..1, persisted, applied live)',
    group: 'actions',
    dangerous: true,
  },
  {
    id: 'cordon',
    hint: 'cordon',
    keys: ['c'],
    help: 'cordon the node (no new sandboxes)',
    group: 'actions',
    views: ['nodes', 'pool', 'triage'],
    dangerous: true,
  },
  { id: 'uncordon', hint: 'uncordon', keys: ['u'], help: 'uncordon the node', group: 'actions', views: ['nodes', 'pool', 'triage'], dangerous: true },
  { id: 'drain', hint: 'drain', keys: ['d'], help: 'drain the node (confirm)', group: 'actions', views: ['nodes', 'pool', 'triage'], dangerous: true },
  {
    id: 'launch',
    hint: 'launch',
    keys: ['n'],
    help: 'launch a sandbox (template and spec prompt) on the node or anywhere',
    group: 'actions',
    views: ['nodes', 'sandboxes'],
    dangerous: true,
  },
  {
    id: 'destroy',
    hint: 'destroy',
    keys: ['ctrl-d'],
    help: 'destroy the selected / marked sandboxes (confirm)',
    group: 'actions',
    views: ['sandboxes'],
    dangerous: true,
  },
  { id: 'pause', hint: 'pause/resume', keys: ['p'], help: 'pause / resume the sandbox', group: 'actions', views: ['sandboxes'], dangerous: true },
];

export function bindings(readonly: boolean): Binding[] {
  return KEYMAP.filter((b) => !(readonly && b.dangerous));
}

/** Names a keypress the way KEYMAP spells it (Ink 6.8 reports Esc with meta, ctrl-d as 'd'+ctrl). */
export function keyName(input: string, key: Key): string {
  if (key.upArrow) return 'up';
  if (key.downArrow) return 'down';
  if (key.leftArrow) return 'left';
  if (key.rightArrow) return 'right';
  if (key.pageUp) return 'pageup';
  if (key.pageDown) return 'pagedown';
  if (key.home) return 'home';
  if (key.end) return 'end';
  if (key.tab) return key.shift ? 'shift-tab' : 'tab';
  if (key.return) return 'enter';
  if (key.escape) return 'escape';
  if (key.backspace || key.delete) return 'backspace';
  if (key.ctrl && input) return `ctrl-${input.toLowerCase()}`;
  if (input === ' ') return 'space';
  return input;
}

/**
 * Keys that arrived in one read, as separate keypresses in order. Ink 6.8 splits escape
 * sequences but hands any other run of bytes over as one input (`jjj` typed fast or sent by
 * tmux, ctrl-u + `0.75` + Enter together), which no binding matches. Pure.
 */
export function splitKeys(chunk: string): { name: string; input: string }[] {
  const out: { name: string; input: string }[] = [];
  for (let i = 0; i < chunk.length; i++) {
    const c = chunk[i]!;
    const code = c.charCodeAt(0);
    if (c === '\r' || c === '\n') {
      if (c === '\r' && chunk[i + 1] === '\n') i++;
      out.push({ name: 'enter', input: '\r' });
    } else if (c === '\t') out.push({ name: 'tab', input: c });
    else if (c === '\x7f' || c === '\b') out.push({ name: 'backspace', input: c });
    else if (c === ' ') out.push({ name: 'space', input: c });
    else if (code >= 1 && code <= 26) out.push({ name: `ctrl-${String.fromCharCode(code + 96)}`, input: String.fromCharCode(code + 96) });
    else if (code >= 0x20) out.push({ name: c, input: c });
  }
  return out;
}

export function resolveKey(name: string, view: ViewName, readonly: boolean): Binding | null {
  return bindings(readonly).find((b) => b.keys.includes(name) && (!b.views || b.views.includes(view))) ?? null;
}

/**
 * The footer's key hints for a view: `? help  : command ...`. With a width, only whole hints
 * that fit (the view's own actions before the general ones past `? help`), never a cut word.
 */
export function hintLine(view: ViewName, readonly: boolean, width = Infinity): string {
  const hints = bindings(readonly).filter((b) => b.hint && (!b.views || b.views.includes(view)));
  const text = (b: Binding) => `${b.keys[0]} ${b.hint}`;
  const all = hints.map(text).join('  ');
  if (all.length <= width) return all;
  const [help, ...rest] = hints;
  const ordered = [...rest.filter((b) => b.views), ...rest.filter((b) => !b.views)];
  const shown = new Set<Binding>(help ? [help] : []);
  let used = help ? text(help).length : 0;
  for (const b of ordered) {
    if (used + 2 + text(b).length > width) continue;
    shown.add(b);
    used += 2 + text(b).length;
  }
  return hints
    .filter((b) => shown.has(b))
    .map(text)
    .join('  ');
}

const GROUP_TITLES: Record<Group, string> = { general: 'General', navigation: 'Navigation', views: 'Views', actions: 'Actions' };

export interface HelpSection {
  title: string;
  rows: { keys: string; help: string; where: string }[];
}

export function helpSections(readonly: boolean): HelpSection[] {
  const list = bindings(readonly);
  return (Object.keys(GROUP_TITLES) as Group[])
    .map((g) => ({
      title: GROUP_TITLES[g],
      rows: list.filter((b) => b.group === g).map((b) => ({ keys: b.keys.join(' '), help: b.help, where: b.views ? b.views.join(',') : 'all' })),
    }))
    .filter((s) => s.rows.length > 0);
}

/** The key reference of docs/console.md (a test fails when the doc is stale). */
export function keymapMarkdown(): string {
  const out: string[] = [];
  for (const s of helpSections(false)) {
    out.push(`### ${s.title}`, '', '| keys | what | views | read-only |', '|---|---|---|---|');
    for (const r of s.rows) {
      const b = KEYMAP.find((x) => x.keys.join(' ') === r.keys)!;
      out.push(`| \`${r.keys}\` | ${r.help} | ${r.where} | ${b.dangerous ? 'absent' : 'yes'} |`);
    }
    out.push('');
  }
  return out.join('\n');
}
