// envd's polling watchers (CreateWatcher, GetWatcherEvents, RemoveWatcher: what clients without
// server streams use, e.g. the Python SDK's synchronous watch_dir). A watcher is a watch whose
// events wait in a bounded buffer until polled; one nobody polls for IDLE_MS is removed, so a
// client that forgets RemoveWatcher leaves no watcher inside the sandbox for long.
import { randomUUID } from 'node:crypto';
import { Code, ConnectError } from './connect.js';

/** Events kept per watcher between polls; past it the oldest go (a poll every few seconds keeps far fewer). */
export const MAX_BUFFERED = 10_000;
/** A watcher not polled for this long is removed. */
export const IDLE_MS = 5 * 60_000;

interface Watcher<E> {
  sandboxID: string;
  events: E[];
  polledAt: number;
  /** Set when the watch ended on its own (its directory went away, the sandbox died). */
  failure?: ConnectError;
  stop(): void;
}

export class Watchers<E> {
  private readonly all = new Map<string, Watcher<E>>();

  constructor(private readonly now: () => number = Date.now) {}

  /** Registers a watch (already set) fed by `source`; returns its id. */
  add(sandboxID: string, source: AsyncIterable<E>): string {
    this.sweep();
    const id = randomUUID();
    const it = source[Symbol.asyncIterator]();
    const w: Watcher<E> = { sandboxID, events: [], polledAt: this.now(), stop: () => void it.return?.() };
    this.all.set(id, w);
    void (async () => {
      for (let r = await it.next(); !r.done; r = await it.next()) {
        w.events.push(r.value);
        if (w.events.length > MAX_BUFFERED) w.events.splice(0, w.events.length - MAX_BUFFERED);
      }
      w.failure ??= new ConnectError(`watcher ${id} ended: its directory or sandbox is gone`, Code.NotFound);
    })().catch((e: unknown) => (w.failure = ConnectError.from(e)));
    return id;
  }

  /** The events since the last poll; a watcher that ended says why once its events are out. */
  take(sandboxID: string, id: string): E[] {
    const w = this.of(sandboxID, id);
    w.polledAt = this.now();
    const events = w.events.splice(0);
    if (events.length === 0 && w.failure) {
      this.all.delete(id);
      throw w.failure;
    }
    return events;
  }

  remove(sandboxID: string, id: string): void {
    this.of(sandboxID, id).stop();
    this.all.delete(id);
  }

  get size(): number {
    return this.all.size;
  }

  /** Removes watchers nobody polled for IDLE_MS. */
  sweep(): void {
    const before = this.now() - IDLE_MS;
    for (const [id, w] of this.all) {
      if (w.polledAt < before) {
        w.stop();
        this.all.delete(id);
      }
    }
  }

  private of(sandboxID: string, id: string): Watcher<E> {
    const w = this.all.get(id);
    // Another sandbox's watcher is as unknown as a missing one.
    if (!w || w.sandboxID !== sandboxID) throw new ConnectError(`no watcher ${JSON.stringify(id)} in this sandbox`, Code.NotFound);
    return w;
  }
}
