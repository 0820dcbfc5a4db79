// Live use per sandbox (GET /admin/v1/usage), polled only while something shows it: the
// sandboxes view or a sandbox's describe pane, with the stream live. The watch stream carries
// no use (it would be a delta per sandbox per second); the nodes read it on request from cgroup
// counters, so a poll costs the daemon a few file reads per sandbox.
import { CubeClient } from '../cli/client.js';
import type { ApiTarget } from './actions.js';
import { withUsage } from './model.js';
import type { ConsoleState, ConsoleStore } from './store.js';

/** As k9s refreshes its metrics: often enough to watch a CPU hog, rare enough to cost nothing. */
export const USAGE_POLL_MS = 2_000;

export function usageShown(s: ConsoleState): boolean {
  const ov = s.ui.overlay;
  return s.conn.state === 'live' && (s.ui.view === 'sandboxes' || (ov?.kind === 'describe' && ov.target?.kind === 'sandbox'));
}

export function startUsagePoll(target: ApiTarget, store: ConsoleStore, everyMs = USAGE_POLL_MS): { stop: () => void } {
  let client: CubeClient | null = null;
  let inFlight = false;
  const tick = async (): Promise<void> => {
    const s = store.getState();
    if (inFlight || !usageShown(s)) return;
    inFlight = true;
    try {
      if (client?.baseUrl !== s.settings.apiUrl) client = new CubeClient({ baseUrl: s.settings.apiUrl, apiKey: target.apiKey });
      const list = await client.usage();
      store.setState((st) => ({ data: withUsage(st.data, list) }));
    } catch {
      // The next tick tries again; the rows keep their last use meanwhile.
    } finally {
      inFlight = false;
    }
  };
  const timer = setInterval(() => void tick(), everyMs);
  // At once when the view opens, not up to 2 s later.
  const unsubscribe = store.subscribe((s, prev) => {
    if (usageShown(s) && !usageShown(prev)) void tick();
  });
  return {
    stop: () => {
      clearInterval(timer);
      unsubscribe();
    },
  };
}
