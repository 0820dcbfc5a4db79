// An async iterable over `source` whose return() calls `stop` at once. An async generator cannot
// do this: return() on one that is suspended in an await (waiting for a change that may never
// come) is queued behind that await, so a watcher nobody reads any more would stay alive.
export function stoppable<T>(source: AsyncIterator<T>, stop: () => void): AsyncIterable<T> {
  return {
    [Symbol.asyncIterator]: () => ({
      next: () => source.next(),
      return: async () => {
        stop();
        return { value: undefined, done: true };
      },
    }),
  };
}
