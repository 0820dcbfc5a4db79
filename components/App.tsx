// The console's frame: header, view tabs, the active view, then the dialog or status line.
// The root is at most rows-1 high (a full-height frame makes Ink 6.8 clear the screen on
// every update) and every line is cut to the width. Keys go to handleKey (commands.ts).
import React, { useCallback, useMemo, useRef } from 'react';
import { Box, useApp, useInput } from 'ink';
import type { Actions } from '../src/tui/actions.js';
import { handleKey, type CommandContext } from '../src/tui/commands.js';
import { keyName } from '../src/tui/keymap.js';
import { StoreContext, useConsole, useTerminalSize } from '../src/tui/react.js';
import type { ConsoleStore } from '../src/tui/store.js';
import type { ViewName } from '../src/tui/views.js';
import { KeysView, SnapshotsView, TemplatesView } from './CatalogViews.js';
import { CommandBar } from './CommandBar.js';
import { Confirm, confirmHeight } from './Confirm.js';
import { Describe } from './Describe.js';
import { ConfigView } from './ConfigView.js';
import { EventsView } from './EventsView.js';
import { Header, headerHeight } from './Header.js';
import { Help } from './Help.js';
import { NodesView } from './NodesView.js';
import { PoolView } from './PoolView.js';
import { Prompt, PROMPT_HEIGHT } from './Prompt.js';
import { SandboxesView } from './SandboxesView.js';
import { TableMode } from './Table.js';
import { StatusLine, statusHeight } from './StatusLine.js';
import { TriageView } from './TriageView.js';

/** The tabs line under the header. */
const TABS_HEIGHT = 1;

const BODIES: Record<ViewName, (p: { height: number; width: number }) => React.ReactElement> = {
  nodes: NodesView,
  sandboxes: SandboxesView,
  pool: PoolView,
  events: EventsView,
  config: ConfigView,
  triage: TriageView,
  templates: TemplatesView,
  snapshots: SnapshotsView,
  keys: KeysView,
};

export interface AppProps {
  store: ConsoleStore;
  actions: Actions;
  /** Called before Ink exits (the entry point restores the terminal and stops the stream). */
  onQuit?: () => void;
  /** Connects the watch stream now (`ctrl-r`). */
  reconnect?: () => void;
  /** Opens a shell in a sandbox on the terminal (src/tui/shell.ts). */
  shell?: (sandboxID: string) => void;
}

export function App(props: AppProps) {
  return (
    <StoreContext.Provider value={props.store}>
      <Frame {...props} />
    </StoreContext.Provider>
  );
}

function Frame({ store, actions, onQuit, reconnect, shell }: AppProps) {
  const { exit } = useApp();
  const { columns, rows } = useTerminalSize();
  const view = useConsole((s) => s.ui.view);
  const overlay = useConsole((s) => s.ui.overlay);
  const flash = useConsole((s) => s.ui.flash);
  const busy = useConsole((s) => s.ui.busy);
  const skin = useConsole((s) => s.settings.skin);
  const wide = useConsole((s) => s.ui.wide);
  const pan = useConsole((s) => s.ui.pan);
  const mode = useMemo(() => ({ wide, pan }), [wide, pan]);
  const top = useConsole((s) => headerHeight(s.data.config)) + TABS_HEIGHT;
  const height = Math.max(6, rows - 1);
  const bottom = overlay?.kind === 'confirm' ? confirmHeight(overlay) : overlay?.kind === 'prompt' ? PROMPT_HEIGHT : statusHeight(flash, busy !== '', columns);
  const bodyHeight = Math.max(2, height - top - bottom);
  const pageRef = useRef(bodyHeight);
  pageRef.current = bodyHeight - 1;
  const paneMaxRef = useRef(0);
  const onPaneMax = useCallback((max: number) => {
    paneMaxRef.current = max;
  }, []);
  const ctx = useMemo<CommandContext>(
    () => ({
      store,
      actions,
      quit: () => {
        onQuit?.();
        exit();
      },
      pageSize: () => pageRef.current,
      paneMax: () => paneMaxRef.current,
      ...(reconnect ? { reconnect } : {}),
      ...(shell ? { shell } : {}),
    }),
    [store, actions, onQuit, exit, reconnect, shell],
  );
  // While a shell has the terminal Ink lets go of the keyboard (and of raw mode).
  const suspended = useConsole((s) => s.ui.suspended);
  useInput((input, key) => handleKey(ctx, keyName(input, key), input), { isActive: !suspended });
  const Body = BODIES[view];
  return (
    <Box flexDirection="column" height={height} width={columns} overflowY="hidden">
      <Header width={columns} />
      <CommandBar width={columns} />
      <Box flexDirection="column" height={bodyHeight} overflowY="hidden">
        {overlay?.kind === 'help' ? (
          <Help height={bodyHeight} width={columns} offset={overlay.offset} onMax={onPaneMax} />
        ) : overlay?.kind === 'describe' ? (
          <Describe pane={overlay} height={bodyHeight} width={columns} onMax={onPaneMax} />
        ) : (
          <TableMode.Provider value={mode}>
            <Body height={bodyHeight} width={columns} />
          </TableMode.Provider>
        )}
      </Box>
      {overlay?.kind === 'confirm' ? (
        <Confirm confirm={overlay} width={columns} skin={skin} />
      ) : overlay?.kind === 'prompt' ? (
        <Prompt prompt={overlay} width={columns} skin={skin} />
      ) : (
        <StatusLine width={columns} />
      )}
    </Box>
  );
}
