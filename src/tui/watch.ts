// The one watch-stream client: GET /admin/v1/watch, SSE parsed into WatchMessages, batched
// into the store once per refresh interval; reconnects with exponential backoff (0.5 s, then
// every second: a restarted daemon is seen within about a second of answering again) and marks
// the data stale while the stream is down or silent (the daemon pings every 15 s).
import type { EventView, WatchMessage } from '../api/types.js';
import { terminalSafe, terminalSafeDeep } from '../cli/terminal.js';
import { DEFAULT_TIMEOUT_MS } from '../cli/client.js';
import { EVENT_BUFFER } from './model.js';
import type { ApiTarget } from './actions.js';
import { SseParser } from './sse.js';
import { applyBatch, setConn, type ConsoleStore } from './store.js';

export interface WatchOptions {
  /** Flush interval: at most one store update (one repaint) per this many ms. */
  refreshMs: number;
  /** No byte for this long (three missed pings) means the stream is dead. */
  silenceMs?: number;
  backoffMinMs?: number;
  backoffMaxMs?: number;
}

export function backoffDelay(attempt: number, minMs: number, maxMs: number): number {
  return Math.min(maxMs, minMs * 2 ** Math.max(0, attempt - 1));
}

export function startWatch(target: ApiTarget, store: ConsoleStore, opts: WatchOptions): { stop: () => void; retryNow: () => void } {
  const silenceMs = opts.silenceMs ?? 45_000;
  const minMs = opts.backoffMinMs ?? 500;
  // 1 s, not 10: after a daemon restart the console came back 8-12 s late. A refused connect to a
  // local or LAN daemon costs well under a millisecond on either side, so once a second is cheap.
  const maxMs = opts.backoffMaxMs ?? 1_000;
  let stopped = false;
  let abort: AbortController | null = null;
  let pending: WatchMessage[] = [];
  const flush = setInterval(() => {
    if (pending.length === 0) return;
    const batch = pending;
    pending = [];
    applyBatch(store, batch);
  }, opts.refreshMs);
  let retry: NodeJS.Timeout | null = null;
  /** The attempt in flight was ended by ctrl-r: the next one starts at once, not after the backoff. */
  let now = false;
  // Replicas in turn: a stream that drops moves to the next (any control replica serves any request).
  const urls = target.urls?.length ? target.urls : [target.baseUrl];
  let at = 0;

  const connectOnce = async (): Promise<void> => {
    abort = new AbortController();
    const ac = abort;
    let silence = setTimeout(() => ac.abort(new Error(`no data for ${silenceMs / 1000}s`)), silenceMs);
    try {
      const res = await fetch(new URL('/admin/v1/watch', urls[at]!), {
        headers: { ...(target.apiKey ? { 'x-api-key': target.apiKey } : {}), accept: 'text/event-stream' },
        signal: ac.signal,
      });
      if (!res.ok || !res.body) throw new Error(terminalSafe(`watch: HTTP ${res.status} ${(await res.text()).slice(0, 200)}`));
      const parser = new SseParser();
      const decoder = new TextDecoder();
      for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
        clearTimeout(silence);
        silence = setTimeout(() => ac.abort(new Error(`no data for ${silenceMs / 1000}s`)), silenceMs);
        for (const m of parser.push(decoder.decode(chunk, { stream: true }))) {
          const msg = terminalSafeDeep(JSON.parse(m.data)) as WatchMessage;
          // A snapshot replaces everything: drop deltas queued before it.
          if (msg.type === 'snapshot') pending = [];
          pending.push(msg);
          if (msg.type === 'snapshot') {
            setConn(store, { state: 'live', since: Date.now(), error: '', attempt: 0 });
            void fillEventGap(msg.snapshot.events);
          }
        }
      }
      throw new Error('watch stream ended');
    } finally {
      clearTimeout(silence);
    }
  };

  /**
   * After a reconnect: the events between the last one seen and the snapshot's oldest (it
   * carries the last 100), fetched from the daemon's history, so nothing that happened while
   * the stream was down is missing from the events view.
   */
  const fillEventGap = async (snapshotEvents: readonly { id: number }[]): Promise<void> => {
    const last = store.getState().data.events.at(-1)?.id;
    const oldest = Math.min(...snapshotEvents.map((e) => e.id));
    if (last === undefined || !(oldest > last + 1)) return;
    try {
      const res = await fetch(new URL(`/admin/v1/events?since=${last}&limit=${EVENT_BUFFER}`, urls[at]!), {
        headers: target.apiKey ? { 'x-api-key': target.apiKey } : {},
        signal: AbortSignal.timeout(DEFAULT_TIMEOUT_MS),
      });
      if (!res.ok) return;
      for (const event of terminalSafeDeep(await res.json()) as EventView[]) if (event.id < oldest) pending.push({ type: 'event', event });
    } catch {
      // The next reconnect tries again; the snapshot's events are there meanwhile.
    }
  };

  const loop = (): void => {
    if (stopped) return;
    connectOnce().catch((e: unknown) => {
      if (stopped) return;
      const cause = (e as { cause?: { code?: string; message?: string } }).cause;
      const reason = abort?.signal.reason instanceof Error ? abort.signal.reason.message : (cause?.code ?? cause?.message ?? (e as Error).message);
      const { conn } = store.getState();
      const attempt = conn.attempt + 1;
      // Stale since the stream went down, not since the last failed retry.
      setConn(store, { state: 'stale', error: reason, attempt, since: conn.state === 'live' ? Date.now() : conn.since });
      if (urls.length > 1) {
        at = (at + 1) % urls.length;
        store.setState((s) => ({ settings: { ...s.settings, apiUrl: urls[at]! } }));
      }
      const delay = now ? 0 : backoffDelay(attempt, minMs, maxMs);
      now = false;
      retry = setTimeout(() => {
        retry = null;
        loop();
      }, delay);
    });
  };
  loop();

  return {
    /** The operator's `ctrl-r`: while the stream is down, try again now instead of at the next backoff step (ending an attempt that hangs). */
    retryNow: () => {
      if (stopped) return;
      if (retry) {
        clearTimeout(retry);
        retry = null;
        loop();
        return;
      }
      // An attempt in flight before any snapshot: a daemon that takes the connection and never
      // answers (frozen) held it until the 45 s silence bound, and ctrl-r did nothing meanwhile.
      // It ends now, and the next attempt (the next replica, if several) starts at once.
      if (abort && !abort.signal.aborted && store.getState().conn.state !== 'live') {
        now = true;
        abort.abort(new Error('retried now (ctrl-r)'));
      }
    },
    stop: () => {
      stopped = true;
      clearInterval(flush);
      if (retry) clearTimeout(retry);
      abort?.abort();
    },
  };
}
