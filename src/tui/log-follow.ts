// Following a sandbox's output (`l`): once a second, while that sandbox's describe pane is open
// and the stream is live, the lines its processes printed since the last one held are appended
// to its logs (the last LOG_KEEP kept). The text comes through CubeClient, which makes it
// terminal-safe (src/cli/terminal.ts): an escape sequence a process prints is shown, not run.
import { CubeClient } from '../cli/client.js';
import { followFrom, LOG_KEEP, newOutput, outputLogLine, type ApiTarget } from './actions.js';
import { setUi, type ConsoleState, type ConsoleStore } from './store.js';

/** `e2b sandbox logs --follow` polls about as often. */
export const FOLLOW_MS = 1_000;

function following(s: ConsoleState): string | undefined {
  const f = s.ui.follow;
  const ov = s.ui.overlay;
  return f && s.conn.state === 'live' && ov?.kind === 'describe' && ov.target?.kind === 'sandbox' && ov.target.id === f.sandboxID ? f.sandboxID : undefined;
}

export function startLogFollow(target: ApiTarget, store: ConsoleStore, everyMs = FOLLOW_MS): { stop: () => void } {
  let client: CubeClient | null = null;
  let inFlight = false;
  const tick = async (): Promise<void> => {
    const s = store.getState();
    const id = following(s);
    if (inFlight || !id) return;
    inFlight = true;
    try {
      if (client?.baseUrl !== s.settings.apiUrl) client = new CubeClient({ baseUrl: s.settings.apiUrl, apiKey: target.apiKey });
      const f = s.ui.follow!;
      const fresh = newOutput(f, await client.output(id, f.since || undefined));
      if (!fresh.length) return;
      const now = store.getState().ui;
      // The operator may have moved on meanwhile (another sandbox's `l`).
      if (now.follow?.sandboxID !== id) return;
      const held = [...(now.logs[id] ?? []), ...fresh.map(outputLogLine)].slice(-LOG_KEEP);
      setUi(store, { logs: { ...now.logs, [id]: held }, follow: followFrom(id, fresh, now.follow) });
    } catch {
      // The sandbox went away or the daemon did not answer: the next tick tries again.
    } finally {
      inFlight = false;
    }
  };
  const timer = setInterval(() => void tick(), everyMs);
  return { stop: () => clearInterval(timer) };
}
