// The console's shell key: a terminal in the selected sandbox, as k9s's shell. The sandbox is
// checked while the console still shows (running, its envd token), so a refusal is a status line
// and nothing is suspended. Then the console suspends (Ink stops reading keys and leaves raw mode,
// its frames are held back, the main screen comes back), the shell (src/cli/shell.ts) has the
// terminal until it exits, the sandbox dies or the daemon goes away, and the console takes the
// terminal again, redrawn, with the outcome in the status line.
import { CubeClient } from '../cli/client.js';
import type { ApiTarget } from './actions.js';
import { TERMINAL_ENTER, TERMINAL_LEAVE, type ScreenSink } from './screen.js';
import { flash, setUi, type ConsoleStore } from './store.js';

export interface ShellHost {
  input: NodeJS.ReadStream;
  output: NodeJS.WriteStream;
  /** The console's screen writer: held while the shell runs, redrawn after. */
  screen: ScreenSink;
}

/** How long Ink may take to let go of the keyboard (a React commit: milliseconds). */
const RELEASE_WAIT_MS = 2_000;

async function released(input: NodeJS.ReadStream): Promise<boolean> {
  const until = Date.now() + RELEASE_WAIT_MS;
  while (input.isRaw || input.listenerCount('readable') > 0) {
    if (Date.now() > until) return false;
    await new Promise((r) => setTimeout(r, 5));
  }
  return true;
}

/** Opens a shell in a sandbox on the console's terminal; resolves once the console is back. */
export function createShellOpener(target: ApiTarget, store: ConsoleStore, host: ShellHost): (sandboxID: string) => Promise<void> {
  return async (sandboxID) => {
    const s = store.getState();
    if (s.ui.suspended) return;
    if (s.ui.busy) return flash(store, `busy: ${s.ui.busy}`, 'warn');
    const { runShell, shellAccess, ShellRefused } = await import('../cli/shell.js');
    const client = new CubeClient({ baseUrl: s.settings.apiUrl, apiKey: target.apiKey });
    let access;
    setUi(store, { busy: `shell in ${sandboxID}` });
    try {
      access = await shellAccess(client, sandboxID);
    } catch (e) {
      if (!(e instanceof ShellRefused)) throw e;
      return flash(store, `no shell: ${e.message}`, 'warn');
    } finally {
      setUi(store, { busy: '' });
    }
    setUi(store, { suspended: true });
    if (!(await released(host.input))) {
      setUi(store, { suspended: false });
      return flash(store, 'no shell: the console did not let go of the keyboard', 'bad');
    }
    host.screen.suspend();
    host.output.write(`${TERMINAL_LEAVE}\r\n[cubectl-tui] shell in ${sandboxID}: exit or ctrl-d returns to the console\r\n`);
    let end;
    try {
      end = await runShell(client, access, { input: host.input, output: host.output });
    } finally {
      host.output.write(TERMINAL_ENTER);
      host.screen.resume();
      setUi(store, { suspended: false });
    }
    if (end.reason !== undefined) flash(store, `shell in ${sandboxID} ended: ${end.reason}`, 'bad');
    else flash(store, `shell in ${sandboxID} ended (exit ${end.exitCode})`, end.exitCode === 0 ? 'ok' : 'warn');
  };
}
