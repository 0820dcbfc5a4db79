// A console store fed from a recorded stream, and an Actions double that records calls
// (the real actions are exercised against a real daemon in e2e.test.ts).
import React from 'react';
import { StoreContext } from '../../src/tui/react.js';
import type { WatchMessage } from '../../src/api/types.js';
import type { Actions } from '../../src/tui/actions.js';
import { applyBatch, createConsoleStore, type ConsoleStore } from '../../src/tui/store.js';
import type { ViewName } from '../../src/tui/views.js';
import { loadStream } from './replay.js';

export function storeFrom(
  msgs: readonly WatchMessage[] = loadStream('watch-handwritten.ndjson'),
  opts: { readonly?: boolean; view?: ViewName } = {},
): ConsoleStore {
  const store = createConsoleStore({ apiUrl: 'http://127.0.0.1:3000', skin: 'mono', ...opts });
  applyBatch(store, msgs);
  store.setState((s) => ({ conn: { ...s.conn, state: 'live' } }));
  return store;
}

export function recordingActions(): Actions & { calls: string[] } {
  const calls: string[] = [];
  const rec =
    (name: string) =>
    async (...args: unknown[]) => {
      calls.push(
        `${name} ${args.map((a) => (typeof a === 'object' && a !== null && 'sandboxID' in a ? (a as { sandboxID: string }).sandboxID : JSON.stringify(a))).join(' ')}`.trim(),
      );
    };
  return {
    calls,
    reload: rec('reload'),
    setReleaseRatio: rec('setReleaseRatio'),
    cordon: rec('cordon'),
    uncordon: rec('uncordon'),
    drain: rec('drain'),
    launch: rec('launch'),
    destroy: rec('destroy'),
    togglePause: rec('togglePause'),
    setConfig: rec('setConfig'),
    exec: rec('exec'),
    logs: rec('logs'),
    olderEvents: async () => {
      calls.push('olderEvents');
      return undefined;
    },
  };
}

export function withStore(store: ConsoleStore, el: React.ReactElement): React.ReactElement {
  return <StoreContext.Provider value={store}>{el}</StoreContext.Provider>;
}
