// The console's one store (zustand vanilla): the watch client writes data with one set()
// per flush, components read through selectors, actions and keys change `ui`.
import { createStore, type StoreApi } from 'zustand/vanilla';
import type { WatchMessage } from '../api/types.js';
import { applyMessage, emptyData, type DataState } from './model.js';
import { pickSkin, type Skin, type SkinName } from './skins.js';
import type { ViewName } from './views.js';
import type { Level } from './format.js';
import type { SortState } from './sorting.js';

export type ConnectionState = 'connecting' | 'live' | 'stale';

export interface Connection {
  state: ConnectionState;
  /** ms epoch of the last state change (the header counts stale seconds from it). */
  since: number;
  /** Why the stream is down, while it is. */
  error: string;
  /** Reconnect attempts since the stream was last live. */
  attempt: number;
}

export interface Confirm {
  kind: 'confirm';
  title: string;
  lines: string[];
  run: () => Promise<void>;
  /** A second way to say yes (drain: `e` evicts after a deadline); its key and label go in the hint line. */
  alt?: { key: string; label: string; run: () => void };
}

export interface Prompt {
  kind: 'prompt';
  title: string;
  value: string;
  /** Extra text under the input, recomputed on every edit (validation, preview). */
  describe: (value: string) => { text: string; valid: boolean };
  submit: (value: string) => Promise<void>;
}

/** A full-body text (help, describe) scrolled by `offset` lines. */
export interface Pane {
  kind: 'help' | 'describe';
  offset: number;
  /** describe: what is described (its lines are recomputed from live data on each render). */
  target?: { kind: 'node' | 'sandbox'; id: string };
}

export type Overlay = null | Pane | { kind: 'command'; text: string } | { kind: 'filter'; text: string } | Confirm | Prompt;

export interface Flash {
  text: string;
  level: Level;
  /** Extra lines (config diff, validation errors), shown under the flash line. */
  detail: string[];
}

/** The sandbox whose output the logs follow (`l`), and where the next poll starts. */
export interface Follow {
  sandboxID: string;
  /** ISO time of the last output line held ('' before any). */
  since: string;
  /** Lines held with exactly that time (the next poll's answer starts with them again). */
  atSince: number;
}

export interface UiState {
  view: ViewName;
  /** Selected row id per view (kept by id, not index, so updates do not move it). */
  selected: Partial<Record<ViewName, string>>;
  filter: Partial<Record<ViewName, string>>;
  /** Each table's sort (`s`/`S`); absent: the view's own order. */
  sort: Partial<Record<ViewName, SortState>>;
  marked: string[];
  /** Per sandbox: the output of commands run from its describe pane (`x`), the last EXEC_KEEP lines. */
  output: Record<string, string[]>;
  /** Per sandbox: its lifecycle from the daemon's whole event history and its processes' output (`l`), oldest first, the last LOG_KEEP. */
  logs: Record<string, string[]>;
  /** The output followed while that sandbox's describe pane is open. */
  follow: Follow | null;
  overlay: Overlay;
  /** Wide mode (`w`): every column, none left out for the width; `pan` columns after the first are scrolled past. */
  wide: boolean;
  pan: number;
  flash: Flash | null;
  /** An action is running (one at a time). */
  busy: string;
  /** A shell has the terminal (src/tui/shell.ts): the console reads no key and draws nothing until it ends. */
  suspended: boolean;
}

export interface Settings {
  apiUrl: string;
  readonly: boolean;
  skin: Skin;
}

export interface ConsoleState {
  data: DataState;
  conn: Connection;
  ui: UiState;
  settings: Settings;
}

export type ConsoleStore = StoreApi<ConsoleState>;

export function createConsoleStore(opts: { apiUrl: string; readonly?: boolean; skin?: SkinName; view?: ViewName }): ConsoleStore {
  return createStore<ConsoleState>(() => ({
    data: emptyData(),
    conn: { state: 'connecting', since: Date.now(), error: '', attempt: 0 },
    ui: {
      view: opts.view ?? 'nodes',
      selected: {},
      filter: {},
      sort: {},
      marked: [],
      output: {},
      logs: {},
      follow: null,
      overlay: null,
      wide: false,
      pan: 0,
      flash: null,
      busy: '',
      suspended: false,
    },
    settings: { apiUrl: opts.apiUrl, readonly: opts.readonly ?? false, skin: pickSkin(opts.skin ?? 'dark') },
  }));
}

/** Applies a batch of watch messages in one set(), so one batch is one render. */
export function applyBatch(store: ConsoleStore, msgs: readonly WatchMessage[]): void {
  if (msgs.length === 0) return;
  store.setState((s) => ({ data: msgs.reduce(applyMessage, s.data) }));
}

export function setUi(store: ConsoleStore, patch: Partial<UiState>): void {
  store.setState((s) => ({ ui: { ...s.ui, ...patch } }));
}

export function setConn(store: ConsoleStore, patch: Partial<Connection>): void {
  store.setState((s) => ({ conn: { ...s.conn, ...patch } }));
}

/** How long an outcome stays on the status line: long enough to read, short enough not to be taken for the present. Failures stay longer. */
export const FLASH_TTL_MS: Record<Level, number> = { ok: 10_000, warn: 20_000, bad: 30_000 };

export function flash(store: ConsoleStore, text: string, level: Level = 'ok', detail: string[] = []): void {
  const f: Flash = { text, level, detail };
  setUi(store, { flash: f });
  // Expires unless another outcome replaced it meanwhile.
  setTimeout(() => {
    if (store.getState().ui.flash === f) setUi(store, { flash: null });
  }, FLASH_TTL_MS[level]).unref();
}
