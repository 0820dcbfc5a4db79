// A push-driven async iterable: producers push, one consumer iterates. Ending the iteration
// early calls onReturn (unsubscribe) and drops what is buffered.
export class AsyncQueue<T> implements AsyncIterable<T> {
  private readonly items: T[] = [];
  private waiting?: (r: IteratorResult<T>) => void;
  private closed = false;

  constructor(private readonly onReturn?: () => void) {}

  push(item: T): void {
    if (this.closed) return;
    if (this.waiting) {
      const w = this.waiting;
      this.waiting = undefined;
      w({ value: item, done: false });
    } else this.items.push(item);
  }

  /** No more items after the buffered ones. */
  end(): void {
    this.closed = true;
    if (this.waiting && this.items.length === 0) {
      const w = this.waiting;
      this.waiting = undefined;
      w({ value: undefined, done: true });
    }
  }

  [Symbol.asyncIterator](): AsyncIterator<T> {
    return {
      next: () => {
        const item = this.items.shift();
        if (item !== undefined) return Promise.resolve({ value: item, done: false });
        if (this.closed) return Promise.resolve({ value: undefined, done: true });
        return new Promise((resolve) => (this.waiting = resolve));
      },
      return: () => {
        this.closed = true;
        this.items.length = 0;
        this.onReturn?.();
        return Promise.resolve({ value: undefined, done: true });
      },
    };
  }
}
