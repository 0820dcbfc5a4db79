import { describe, expect, it } from 'vitest';
import { Code } from '../../src/api/envd/connect.js';
import { IDLE_MS, MAX_BUFFERED, Watchers } from '../../src/api/envd/watchers.js';

/** A source that yields what is pushed and records whether it was stopped. */
function source() {
  const queue: number[] = [];
  let wake: (() => void) | undefined;
  let ended = false;
  const s = {
    stopped: false,
    push(...n: number[]) {
      queue.push(...n);
      wake?.();
    },
    end() {
      ended = true;
      wake?.();
    },
    [Symbol.asyncIterator]: () => ({
      next: async (): Promise<IteratorResult<number>> => {
        while (!queue.length && !ended && !s.stopped) await new Promise<void>((r) => (wake = r));
        return queue.length ? { value: queue.shift()!, done: false } : { value: undefined, done: true };
      },
      return: async (): Promise<IteratorResult<number>> => {
        s.stopped = true;
        wake?.();
        return { value: undefined, done: true };
      },
    }),
  };
  return s;
}
const tick = () => new Promise((r) => setImmediate(r));

describe('polling watchers', () => {
  it('hands out what came since the last poll, to its own sandbox only, and stops on remove', async () => {
    const w = new Watchers<number>();
    const s = source();
    const id = w.add('sb1', s);
    s.push(1, 2);
    await tick();
    expect(w.take('sb1', id)).toEqual([1, 2]);
    expect(w.take('sb1', id)).toEqual([]);
    expect(() => w.take('sb2', id)).toThrow(expect.objectContaining({ code: Code.NotFound }));
    w.remove('sb1', id);
    expect(s.stopped).toBe(true);
    expect(() => w.take('sb1', id)).toThrow(/no watcher/);
  });

  it('keeps the newest MAX_BUFFERED events, and says once the watch ended after its last events', async () => {
    const w = new Watchers<number>();
    const s = source();
    const id = w.add('sb', s);
    s.push(...Array.from({ length: MAX_BUFFERED + 5 }, (_, i) => i));
    s.end();
    await tick();
    const got = w.take('sb', id);
    expect(got).toHaveLength(MAX_BUFFERED);
    expect(got[0]).toBe(5);
    expect(() => w.take('sb', id)).toThrow(/ended/);
    expect(w.size).toBe(0);
  });

  it('removes a watcher nobody polls', () => {
    let now = 0;
    const w = new Watchers<number>(() => now);
    const s = source();
    w.add('sb', s);
    now = IDLE_MS + 1;
    w.sweep();
    expect(w.size).toBe(0);
    expect(s.stopped).toBe(true);
  });
});
