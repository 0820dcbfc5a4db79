// Mounts the console on the real terminal: alternate screen, no autowrap, mouse off,
// only changed lines written (screen.ts); restores the terminal however the process ends.
import React from 'react';
import { render } from 'ink';
import { App } from '../../components/App.js';
import { createActions, type ApiTarget } from './actions.js';
import { installFrameCache } from './frame-cache.js';
import { ScreenSink } from './screen.js';
import { createConsoleStore, flash } from './store.js';
import type { SkinName } from './skins.js';
import { startWatch } from './watch.js';

export interface RunOptions {
  target: ApiTarget;
  readonly: boolean;
  refreshMs: number;
  skin: SkinName;
  /** Said on the last line at start (the bundled daemon was started, no replica answered). */
  note?: string;
}

// Alt screen on, autowrap off, mouse reporting off (SREs select text with the mouse).
const ENTER = '\x1b[?1049h\x1b[?7l\x1b[?25l\x1b[?1000l\x1b[?1002l\x1b[?1003l\x1b[?1006l\x1b[H\x1b[2J';
const LEAVE = '\x1b[?7h\x1b[?25h\x1b[?1049l';

export async function runConsole(opts: RunOptions): Promise<void> {
  const store = createConsoleStore({ apiUrl: opts.target.baseUrl, readonly: opts.readonly, skin: opts.skin });
  const actions = createActions(opts.target, store);
  if (opts.note) flash(store, opts.note, 'warn');
  const watch = startWatch(opts.target, store, { refreshMs: opts.refreshMs });
  // debug: Ink hands every whole frame to the sink, which writes only what changed.
  const screen = new ScreenSink(process.stdout);
  let restored = false;
  const restore = () => {
    if (restored) return;
    restored = true;
    watch.stop();
    screen.close();
    process.stdout.write(LEAVE);
  };
  const die = (code: number) => () => {
    restore();
    process.exit(code);
  };
  process.once('SIGINT', die(130));
  process.once('SIGTERM', die(143));
  process.once('SIGHUP', die(129));
  process.once('exit', restore);
  process.once('uncaughtException', (e) => {
    restore();
    process.stderr.write(`cubectl-tui: ${e.stack ?? e.message}\n`);
    process.exit(1);
  });
  await installFrameCache();
  process.stdout.write(ENTER);
  const ink = render(<App store={store} actions={actions} onQuit={restore} />, {
    stdout: screen as unknown as NodeJS.WriteStream,
    debug: true,
    exitOnCtrlC: false,
    patchConsole: false,
  });
  await ink.waitUntilExit();
  restore();
}
