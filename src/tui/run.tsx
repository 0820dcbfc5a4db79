// Mounts the console on the real terminal: alternate screen, no autowrap, mouse off,
// only changed lines written (screen.ts); restores the terminal however the process ends.
import React from 'react';
import { render } from 'ink';
import { App } from '../../components/App.js';
import { createActions, type ApiTarget } from './actions.js';
import { installFrameCache } from './frame-cache.js';
import { ScreenSink, TERMINAL_ENTER, TERMINAL_LEAVE } from './screen.js';
import { createConsoleStore, flash } from './store.js';
import type { SkinName } from './skins.js';
import { startCatalogPoll } from './catalog.js';
import { startLogFollow } from './log-follow.js';
import { startUsagePoll } from './usage-poll.js';
import { createShellOpener } from './shell.js';
import { startWatch } from './watch.js';

export interface RunOptions {
  target: ApiTarget;
  readonly: boolean;
  refreshMs: number;
  skin: SkinName;
  /** Said on the last line at start (the bundled daemon was started, no replica answered). */
  note?: string;
}

export async function runConsole(opts: RunOptions): Promise<void> {
  const store = createConsoleStore({ apiUrl: opts.target.baseUrl, readonly: opts.readonly, skin: opts.skin });
  const actions = createActions(opts.target, store);
  if (opts.note) flash(store, opts.note, 'warn');
  const watch = startWatch(opts.target, store, { refreshMs: opts.refreshMs });
  const usage = startUsagePoll(opts.target, store);
  const follow = startLogFollow(opts.target, store);
  const catalog = startCatalogPoll(opts.target, store);
  // debug: Ink hands every whole frame to the sink, which writes only what changed.
  const screen = new ScreenSink(process.stdout);
  let restored = false;
  const restore = () => {
    if (restored) return;
    restored = true;
    watch.stop();
    usage.stop();
    follow.stop();
    catalog.stop();
    screen.close();
    process.stdout.write(TERMINAL_LEAVE);
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
  process.stdout.write(TERMINAL_ENTER);
  const openShell = createShellOpener(opts.target, store, { input: process.stdin, output: process.stdout, screen });
  const shell = (sandboxID: string) => {
    openShell(sandboxID).catch((e: unknown) => flash(store, `shell in ${sandboxID} failed: ${(e as Error).message}`, 'bad'));
  };
  const ink = render(<App store={store} actions={actions} onQuit={restore} reconnect={watch.retryNow} shell={shell} />, {
    stdout: screen as unknown as NodeJS.WriteStream,
    debug: true,
    exitOnCtrlC: false,
    patchConsole: false,
  });
  await ink.waitUntilExit();
  restore();
}
