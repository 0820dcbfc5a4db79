// React glue for the store and the terminal: one context, selector hooks, terminal size.
import { createContext, useContext, useEffect, useState } from 'react';
import { useStdout } from 'ink';
import { useStore } from 'zustand';
import { useShallow } from 'zustand/react/shallow';
import { fadedSkin } from './skins.js';
import type { ConsoleState, ConsoleStore } from './store.js';
import type { ViewName } from './views.js';

export const StoreContext = createContext<ConsoleStore | null>(null);

function useConsoleStore(): ConsoleStore {
  const store = useContext(StoreContext);
  if (!store) throw new Error('console components must be rendered inside <StoreContext.Provider>');
  return store;
}

/** Selects a value that keeps its identity between updates (a field, a primitive). */
export function useConsole<T>(selector: (s: ConsoleState) => T): T {
  return useStore(useConsoleStore(), selector);
}

/** Selects a fresh object or array: compared shallowly, or React loops (zustand v5). */
export function useConsoleShallow<T>(selector: (s: ConsoleState) => T): T {
  return useStore(useConsoleStore(), useShallow(selector));
}

/** ink-testing-library has no rows and 100 columns: fall back to 100 x 24. */
export function useTerminalSize(): { columns: number; rows: number } {
  const { stdout } = useStdout();
  const read = () => ({ columns: stdout.columns || 100, rows: stdout.rows || 24 });
  const [size, setSize] = useState(read);
  useEffect(() => {
    const onResize = () => setSize(read());
    stdout.on('resize', onResize);
    return () => {
      stdout.off('resize', onResize);
    };
  }, [stdout]);
  return size;
}

/** A clock that ticks every `ms` while `active` (no idle redraws otherwise). */
export function useNow(ms: number, active = true): number {
  const [now, setNow] = useState(Date.now);
  useEffect(() => {
    if (!active) return;
    const t = setInterval(() => setNow(Date.now()), ms);
    return () => clearInterval(t);
  }, [ms, active]);
  return now;
}

/** What every table view reads: the data, its filter, sort and selection, the skin (faded while the stream is STALE). */
export function useViewState(view: ViewName) {
  return useConsoleShallow((s) => ({
    data: s.data,
    filter: s.ui.filter[view],
    sort: s.ui.sort[view],
    selected: s.ui.selected[view],
    skin: s.conn.state === 'stale' ? fadedSkin(s.settings.skin) : s.settings.skin,
  }));
}
