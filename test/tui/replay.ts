// Loads a recorded watch stream (one WatchMessage per line) for store and component tests.
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import type { WatchMessage } from '../../src/api/types.js';

export function loadStream(name: string): WatchMessage[] {
  const path = fileURLToPath(new URL(`../fixtures/${name}`, import.meta.url));
  return readFileSync(path, 'utf8')
    .split('\n')
    .filter((l) => l.trim())
    .map((l) => JSON.parse(l) as WatchMessage);
}

/** The same messages framed as the daemon sends them (text/event-stream). */
export function toSse(msgs: readonly WatchMessage[]): string {
  return msgs.map((m) => `event: ${m.type}\ndata: ${JSON.stringify(m)}\n\n`).join(': ping\n\n');
}

/**
 * Polls `frame()` until `pred` holds (bounded), yielding to React's scheduler between
 * checks; returns the frame so the test asserts on it. Throws with the last frame.
 */
export async function waitForFrame(frame: () => string | undefined, pred: (f: string) => boolean, timeoutMs = 3000): Promise<string> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const f = frame() ?? '';
    if (pred(f)) return f;
    if (Date.now() > end) throw new Error(`frame never matched:\n${f}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

/** Lets React run the effects of a fresh render (Ink attaches its stdin listener in one). */
export function inputReady(): Promise<void> {
  return new Promise((r) => setImmediate(() => setTimeout(r, 0)));
}
