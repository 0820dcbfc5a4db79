// What each key does: navigation and overlays change `ui`; dangerous commands open a
// confirm or prompt whose answer calls actions.ts. Modal overlays take every key first.
import type { MasterConfig } from '../config/schema.js';
import { DRAIN_DEADLINE_SEC, formatLaunch, parseDeadline, parseLaunch, parseRatio, previewReleaseRatio, type Actions } from './actions.js';
import { resolveKey, splitKeys, type CommandId } from './keymap.js';
import { launchDefaultsOf, releaseRatioOf } from './model.js';
import { configRows, rowIDs, selectedNodeID } from './selectors.js';
import { nextSort, sortLabel } from './sorting.js';
import { flash, setUi, type ConsoleState, type ConsoleStore, type Prompt } from './store.js';
import { resolveView, VIEWS } from './views.js';

export interface CommandContext {
  store: ConsoleStore;
  actions: Actions;
  quit: () => void;
  /** Rows a page key moves (the table's visible height). */
  pageSize: () => number;
  /** The farthest a help/describe pane scrolls (its wrapped length minus its height), as last drawn. */
  paneMax?: () => number;
  /** Connects the watch stream now instead of at the next retry (`ctrl-r`). */
  reconnect?: () => void;
  /** Hands the terminal to a shell in the sandbox until it ends (src/tui/shell.ts); absent where there is no terminal to hand over. */
  shell?: (sandboxID: string) => void;
}

function currentIDs(s: ConsoleState): string[] {
  return rowIDs(s.ui.view, s.data, s.ui.filter[s.ui.view], s.ui.sort[s.ui.view]);
}

function move(ctx: CommandContext, to: (index: number, count: number) => number): void {
  const s = ctx.store.getState();
  const ids = currentIDs(s);
  if (ids.length === 0) return;
  const at = Math.max(0, ids.indexOf(s.ui.selected[s.ui.view] ?? ''));
  const next = Math.min(ids.length - 1, Math.max(0, to(at, ids.length)));
  setUi(ctx.store, { selected: { ...s.ui.selected, [s.ui.view]: ids[next] } });
}

function switchView(ctx: CommandContext, step: number): void {
  const { view } = ctx.store.getState().ui;
  const i = VIEWS.indexOf(view);
  setUi(ctx.store, { view: VIEWS[(i + step + VIEWS.length) % VIEWS.length]! });
}

function selectedNode(s: ConsoleState): string | undefined {
  return selectedNodeID(s.ui.view, s.ui.selected[s.ui.view], currentIDs(s));
}

function selectedSandbox(s: ConsoleState) {
  // In a sandbox's describe pane, the sandbox described.
  const ov = s.ui.overlay;
  if (ov?.kind === 'describe' && ov.target?.kind === 'sandbox') return s.data.sandboxes[ov.target.id];
  if (s.ui.view !== 'sandboxes') return undefined;
  const ids = currentIDs(s);
  const id = s.ui.selected.sandboxes && ids.includes(s.ui.selected.sandboxes) ? s.ui.selected.sandboxes : ids[0];
  return id ? s.data.sandboxes[id] : undefined;
}

function prompt(ctx: CommandContext, p: Omit<Prompt, 'kind'>): void {
  setUi(ctx.store, { overlay: { kind: 'prompt', ...p } });
}

function needNode(ctx: CommandContext): string | undefined {
  const id = selectedNode(ctx.store.getState());
  if (!id) flash(ctx.store, 'no node selected', 'warn');
  return id;
}

export function runCommand(ctx: CommandContext, id: CommandId): void {
  const { store, actions } = ctx;
  const s = store.getState();
  switch (id) {
    case 'help':
      return setUi(store, { overlay: { kind: 'help', offset: 0 } });
    case 'describe': {
      if (s.ui.view === 'sandboxes') {
        const sb = selectedSandbox(s);
        return sb
          ? setUi(store, { overlay: { kind: 'describe', offset: 0, target: { kind: 'sandbox', id: sb.sandboxID } } })
          : flash(store, 'no sandbox selected', 'warn');
      }
      const nodeID = needNode(ctx);
      if (nodeID && nodeID !== 'all') setUi(store, { overlay: { kind: 'describe', offset: 0, target: { kind: 'node', id: nodeID } } });
      return;
    }
    case 'exec': {
      const sb = selectedSandbox(s);
      if (!sb) return flash(store, 'no sandbox selected', 'warn');
      const id = sb.sandboxID;
      return prompt(ctx, {
        title: `run in ${id} (sh -c, as user)`,
        value: '',
        describe: (v) =>
          v.trim() ? { text: 'enter: run it; the output shows in the describe pane', valid: true } : { text: 'a command line, e.g. ps aux', valid: false },
        submit: async (v) => {
          await actions.exec(id, v.trim());
          showDescribed(ctx, id);
        },
      });
    }
    case 'shell': {
      const sb = selectedSandbox(s);
      if (!sb) return flash(store, 'no sandbox selected', 'warn');
      // The watch's word first: a paused sandbox gets a line, not a suspended console.
      if (sb.state !== 'running')
        return flash(
          store,
          `no shell: sandbox ${sb.sandboxID} is ${sb.state}${sb.state === 'paused' ? ' (p resumes it)' : ''}: a shell needs it running`,
          'warn',
        );
      if (!ctx.shell) return flash(store, 'no shell: this console has no terminal to hand over', 'warn');
      return ctx.shell(sb.sandboxID);
    }
    case 'logs': {
      const sb = selectedSandbox(s);
      if (!sb) return flash(store, 'no sandbox selected', 'warn');
      const id = sb.sandboxID;
      void actions.logs(id).then(() => showDescribed(ctx, id));
      return;
    }
    case 'olderEvents': {
      // The first older event (the row under the previous oldest, newest first) is selected: the page shows.
      void actions.olderEvents().then((e) => {
        if (e) setUi(store, { selected: { ...store.getState().ui.selected, events: String(e.id) } });
      });
      return;
    }
    case 'editConfig': {
      if (s.ui.view !== 'config') return;
      const ids = currentIDs(s);
      const id = s.ui.selected.config && ids.includes(s.ui.selected.config) ? s.ui.selected.config : ids[0];
      const row = configRows(s.data).find((r) => r.path === id);
      if (!row) return flash(store, 'no config key selected', 'warn');
      if (row.restart)
        return flash(
          store,
          `${row.path} takes effect after a restart: edit ${row.path.startsWith('master.') ? 'cubemaster.yaml' : 'cubelet.toml'} and restart cubed`,
          'warn',
        );
      const key = row.path.replace(/^(master|cubelet)\./, '');
      return prompt(ctx, {
        title: `${key} (now ${row.value}), applied live`,
        value: row.value,
        describe: (v) =>
          v.trim() ? { text: 'enter: the daemon validates, persists and applies it', valid: true } : { text: 'a value (JSON for lists)', valid: false },
        submit: async (v) => actions.setConfig(key, parseConfigValue(v)),
      });
    }
    case 'sort':
    case 'sortReverse': {
      const { view } = s.ui;
      const sort = nextSort(view, s.ui.sort[view], id === 'sortReverse');
      const label = sortLabel(view, sort);
      setUi(store, { sort: { ...s.ui.sort, [view]: sort } });
      return flash(store, label ? `${view} sorted by ${label.title} ${label.arrow === '^' ? 'ascending' : 'descending'}` : `${view} in their own order`);
    }
    case 'quit':
      return ctx.quit();
    case 'reconnect':
      if (s.conn.state === 'live') return flash(store, 'connected: nothing to retry');
      ctx.reconnect?.();
      return flash(store, `reconnecting to ${s.settings.apiUrl} now`, 'warn');
    case 'wide':
      setUi(store, { wide: !s.ui.wide, pan: 0 });
      return flash(
        store,
        s.ui.wide ? 'wide mode off: columns that do not fit are left out' : 'wide mode: every column; left/right pan (the first column stays)',
      );
    case 'panLeft':
    case 'panRight':
      if (!s.ui.wide) return;
      return setUi(store, { pan: Math.max(0, s.ui.pan + (id === 'panRight' ? 1 : -1)) });
    case 'command':
      return setUi(store, { overlay: { kind: 'command', text: '' } });
    case 'filter':
      return setUi(store, { overlay: { kind: 'filter', text: s.ui.filter[s.ui.view] ?? '' } });
    case 'back':
      return setUi(store, { filter: { ...s.ui.filter, [s.ui.view]: '' }, flash: null });
    case 'up':
      return move(ctx, (i) => i - 1);
    case 'down':
      return move(ctx, (i) => i + 1);
    case 'pageUp':
      return move(ctx, (i) => i - ctx.pageSize());
    case 'pageDown':
      return move(ctx, (i) => i + ctx.pageSize());
    case 'top':
      return move(ctx, () => 0);
    case 'bottom':
      return move(ctx, (_i, n) => n - 1);
    case 'nextView':
      return switchView(ctx, 1);
    case 'prevView':
      return switchView(ctx, -1);
    case 'mark': {
      const sb = selectedSandbox(s);
      if (!sb) return;
      const marked = s.ui.marked.includes(sb.sandboxID) ? s.ui.marked.filter((x) => x !== sb.sandboxID) : [...s.ui.marked, sb.sandboxID];
      setUi(store, { marked });
      return move(ctx, (i) => i + 1);
    }
    case 'reload':
      void actions.reload();
      return;
    case 'releaseRatio': {
      const current = releaseRatioOf(s.data.config);
      const master = s.data.config?.master as MasterConfig | undefined;
      const nodeID = selectedNode(s);
      const node = nodeID ? s.data.nodes[nodeID] : undefined;
      return prompt(ctx, {
        title: `paused_resource_release_ratio (now ${current ?? 'unknown'}), 0..1`,
        value: current === null ? '' : String(current),
        describe: (v) => {
          const r = parseRatio(v);
          if (typeof r === 'string') return { text: r, valid: false };
          if (!node || !master) return { text: 'enter to apply', valid: true };
          try {
            return { text: previewReleaseRatio(node, master, r), valid: true };
          } catch (e) {
            return { text: (e as Error).message, valid: true };
          }
        },
        submit: async (v) => {
          const r = parseRatio(v);
          if (typeof r === 'number') await actions.setReleaseRatio(r, nodeID);
        },
      });
    }
    case 'cordon':
    case 'uncordon': {
      const nodeID = needNode(ctx);
      if (nodeID) void actions[id](nodeID);
      return;
    }
    case 'drain': {
      const nodeID = needNode(ctx);
      if (!nodeID) return;
      const n = s.data.nodes[nodeID];
      const count = n ? String(n.sandboxes.total) : '?';
      return setUi(store, {
        overlay: {
          kind: 'confirm',
          title: `Drain node ${nodeID}?`,
          lines: [
            `No new sandbox is placed on it. Its ${count} sandbox(es) are NOT migrated:`,
            'y: they run until they end or time out; e: destroyed after a deadline.',
          ],
          run: () => actions.drain(nodeID),
          alt: {
            key: 'e',
            label: 'evict after a deadline',
            run: () =>
              prompt(ctx, {
                title: `evict: seconds until ${count} sandbox(es) on ${nodeID} are DESTROYED`,
                value: String(DRAIN_DEADLINE_SEC),
                describe: (v) => {
                  const sec = parseDeadline(v);
                  return typeof sec === 'string'
                    ? { text: sec, valid: false }
                    : { text: `enter: drain now, destroy what is left at ${sec}s (not migrated)`, valid: true };
                },
                submit: async (v) => {
                  const sec = parseDeadline(v);
                  if (typeof sec === 'number') await actions.drain(nodeID, { evict: true, deadlineSec: sec });
                },
              }),
          },
        },
      });
    }
    case 'launch': {
      const nodeID = s.ui.view === 'nodes' ? selectedNode(s) : undefined;
      const base = { ...launchDefaultsOf(s.data.config), ...(nodeID ? { nodeID } : {}) };
      return prompt(ctx, {
        title: `launch a sandbox ${nodeID ? `on ${nodeID}` : 'anywhere'}`,
        value: formatLaunch(base),
        describe: (v) => {
          const spec = parseLaunch(v, base);
          return typeof spec === 'string' ? { text: spec, valid: false } : { text: 'enter to launch', valid: true };
        },
        submit: async (v) => {
          const spec = parseLaunch(v, base);
          if (typeof spec !== 'string') await actions.launch(spec);
        },
      });
    }
    case 'destroy': {
      const ids = s.ui.marked.length ? s.ui.marked : [selectedSandbox(s)?.sandboxID].filter((x): x is string => !!x);
      if (ids.length === 0) return flash(store, 'no sandbox selected', 'warn');
      return setUi(store, {
        overlay: {
          kind: 'confirm',
          title: `Destroy ${ids.length === 1 ? ids[0] : `${ids.length} sandboxes`}?`,
          lines: [ids.slice(0, 5).join(' ') + (ids.length > 5 ? ` and ${ids.length - 5} more` : ''), 'Processes are killed and the writable layer is removed.'],
          run: () => actions.destroy(ids),
        },
      });
    }
    case 'pause': {
      const sb = selectedSandbox(s);
      if (!sb) return flash(store, 'no sandbox selected', 'warn');
      void actions.togglePause(sb);
      return;
    }
    default:
      // What is left are the views' ids ('view:<name>'), one per view.
      return setUi(store, { view: id.slice(5) as (typeof VIEWS)[number] });
  }
}

/** The sandbox's describe pane, scrolled to its end (where exec output and logs are). */
function showDescribed(ctx: CommandContext, id: string): void {
  const ov = ctx.store.getState().ui.overlay;
  // A dialog opened meanwhile keeps the screen.
  if (ov !== null && ov.kind !== 'describe') return;
  setUi(ctx.store, { overlay: { kind: 'describe', offset: Number.MAX_SAFE_INTEGER, target: { kind: 'sandbox', id } } });
}

/** How far a key scrolls a help or describe pane (the navigation keys of the tables); null: not a scroll key. */
function paneStep(name: string, page: number): number | null {
  const b = resolveKey(name, 'nodes', true);
  switch (b?.id) {
    case 'up':
      return -1;
    case 'down':
      return 1;
    case 'pageUp':
      return -page;
    case 'pageDown':
      return page;
    case 'top':
      return -Number.MAX_SAFE_INTEGER;
    case 'bottom':
      return Number.MAX_SAFE_INTEGER;
    default:
      return name === 'space' ? page : null;
  }
}

/** What the operator typed in the config editor: JSON when it parses (numbers, booleans, lists), else the text. */
export function parseConfigValue(text: string): unknown {
  const t = text.trim();
  try {
    return JSON.parse(t);
  } catch {
    return t;
  }
}

/** Runs a `:` command line: a view name, or q/quit (with or without vi's `!`). */
export function runCommandLine(ctx: CommandContext, text: string): void {
  const word = text.trim();
  if (/^(q|quit)!?$/.test(word)) return ctx.quit();
  const view = resolveView(word);
  if (view) setUi(ctx.store, { view, overlay: null });
  else
    setUi(ctx.store, {
      overlay: null,
      flash: { text: `unknown command ":${word}" (try ${VIEWS.map((v) => `:${v}`).join(' ')} :q)`, level: 'warn', detail: [] },
    });
}

/** Line editing shared by the command bar, the filter and prompts (pasted text arrives whole). */
export function editLine(text: string, name: string, input: string): string | null {
  if (name === 'backspace') return text.slice(0, -1);
  if (name === 'ctrl-u') return '';
  if (name === 'space') return text + ' ';
  if (!name.startsWith('ctrl-') && /^[\x20-\x7e]+$/.test(input)) return text + input;
  return null;
}

/**
 * Keys that arrived in one read are handled one by one, in order (`jjj` moves three rows;
 * ctrl-u, `0.75`, Enter applies 0.75). An Enter that submits or closes a dialog ends the
 * chunk: what was pasted after a line end never reaches the view's keys (a pasted `d` then `y`
 * must not drain a node).
 */
function handleChunk(ctx: CommandContext, chunk: string): void {
  for (const k of splitKeys(chunk)) {
    const open = ctx.store.getState().ui.overlay !== null;
    handleKey(ctx, k.name, k.input);
    if (k.name === 'enter' && open && ctx.store.getState().ui.overlay === null) return;
  }
}

/** Routes one keypress: the overlay first (modal), then the keymap. */
export function handleKey(ctx: CommandContext, name: string, input: string): void {
  if (input.length > 1 && !input.startsWith('\x1b')) return handleChunk(ctx, input);
  const { store } = ctx;
  const s = store.getState();
  const ov = s.ui.overlay;
  if (ov === null) {
    const b = resolveKey(name, s.ui.view, s.settings.readonly);
    if (b) runCommand(ctx, b.id);
    return;
  }
  if (name === 'ctrl-c') return ctx.quit();
  switch (ov.kind) {
    case 'help':
    case 'describe': {
      if (name === 'escape' || name === '?' || name === 'q' || name === 'enter') return setUi(store, { overlay: null });
      // A sandbox's pane takes its own keys (exec, logs) as the sandboxes table does.
      const own = ov.kind === 'describe' && ov.target?.kind === 'sandbox' ? resolveKey(name, 'sandboxes', s.settings.readonly) : null;
      if (own?.id === 'exec' || own?.id === 'shell' || own?.id === 'logs') return runCommand(ctx, own.id);
      const step = paneStep(name, ctx.pageSize());
      const max = ctx.paneMax?.() ?? Number.MAX_SAFE_INTEGER;
      if (step !== null) setUi(store, { overlay: { ...ov, offset: Math.max(0, Math.min(max, Math.min(max, ov.offset) + step)) } });
      return;
    }
    case 'confirm':
      if (name === 'y' || name === 'enter') {
        setUi(store, { overlay: null });
        void ov.run();
      } else if (ov.alt && name === ov.alt.key) {
        setUi(store, { overlay: null });
        ov.alt.run();
      } else if (name === 'n' || name === 'escape') setUi(store, { overlay: null });
      return;
    case 'command':
    case 'filter': {
      if (name === 'escape') return setUi(store, { overlay: null });
      if (name === 'enter') {
        if (ov.kind === 'command') return runCommandLine(ctx, ov.text);
        return setUi(store, { overlay: null });
      }
      const text = editLine(ov.text, name, input);
      if (text === null) return;
      if (ov.kind === 'filter') setUi(store, { overlay: { kind: 'filter', text }, filter: { ...s.ui.filter, [s.ui.view]: text } });
      else setUi(store, { overlay: { kind: 'command', text } });
      return;
    }
    case 'prompt': {
      if (name === 'escape') return setUi(store, { overlay: null });
      if (name === 'enter') {
        if (!ov.describe(ov.value).valid) return;
        setUi(store, { overlay: null });
        void ov.submit(ov.value);
        return;
      }
      const value = editLine(ov.value, name, input);
      if (value !== null) setUi(store, { overlay: { ...ov, value } });
      return;
    }
  }
}
