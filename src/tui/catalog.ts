// Templates, snapshots and API keys for views 7, 8 and 9: each fetched when its view opens and
// every 5 s while it shows (they change on builds, imports, snapshots and key edits, not per
// second), templates with the build status of those a build made.
import { CubeClient } from '../cli/client.js';
import type { ApiTarget } from './actions.js';
import type { DataState, TemplateRow } from './model.js';
import type { ConsoleState, ConsoleStore } from './store.js';
import type { ViewName } from './views.js';

export const CATALOG_MS = 5_000;

const CATALOG_VIEWS: readonly ViewName[] = ['templates', 'snapshots', 'keys'];
/** The catalog view showing, while the stream is live; null otherwise. */
const shown = (s: ConsoleState): ViewName | null => (s.conn.state === 'live' && CATALOG_VIEWS.includes(s.ui.view) ? s.ui.view : null);

async function templatesOf(c: CubeClient): Promise<TemplateRow[]> {
  const listing = await c.templates();
  return Promise.all(
    listing.map(async (t) => {
      const r = t.record;
      const build = r?.buildID
        ? await c.buildStatus(r.name, r.buildID, Number.MAX_SAFE_INTEGER).then(
            (b) => b.status,
            () => undefined,
          )
        : undefined;
      return {
        templateID: t.templateID,
        nodes: t.nodes,
        ...(r
          ? {
              digest: r.digest,
              layers: r.layers.length,
              source: r.source,
              created: r.created,
              ...(r.sizeBytes === undefined ? {} : { sizeBytes: r.sizeBytes }),
              ...(r.buildID ? { buildID: r.buildID } : {}),
            }
          : {}),
        ...(build ? { build } : {}),
      };
    }),
  );
}

/** What one view's fetch writes into the data. */
async function fetchFor(c: CubeClient, view: ViewName): Promise<Partial<DataState>> {
  if (view === 'templates') return { templates: await templatesOf(c) };
  if (view === 'snapshots') return { snapshots: await c.snapshots() };
  return { keys: await c.keys() };
}

export function startCatalogPoll(target: ApiTarget, store: ConsoleStore, everyMs = CATALOG_MS): { stop: () => void } {
  let client: CubeClient | null = null;
  let inFlight = false;
  const tick = async (): Promise<void> => {
    const s = store.getState();
    const view = shown(s);
    if (inFlight || !view) return;
    inFlight = true;
    try {
      if (client?.baseUrl !== s.settings.apiUrl) client = new CubeClient({ baseUrl: s.settings.apiUrl, apiKey: target.apiKey });
      const patch = await fetchFor(client, view);
      store.setState((st) => ({ data: { ...st.data, ...patch } }));
    } catch {
      // The next tick tries again; the views keep what they showed.
    } finally {
      inFlight = false;
    }
    // Another catalog view opened while this one was fetched: its rows now, not in 5 s.
    const now = shown(store.getState());
    if (now && now !== view) void tick();
  };
  const timer = setInterval(() => void tick(), everyMs);
  const unsubscribe = store.subscribe((s, prev) => {
    if (shown(s) !== shown(prev)) void tick();
  });
  return {
    stop: () => {
      clearInterval(timer);
      unsubscribe();
    },
  };
}
