// A push-driven async iterable: producers push, one consumer iterates. Ending the iteration
// early calls onReturn (unsubscribe) and drops what is buffered. `weight` is what the items
// buffered and not yet taken weigh (by `weigh`), so a producer can bound a slow consumer.
export class AsyncQueue<T> implements AsyncIterable<T> {
  private readonly items: T[] = [];
  private waiting?: (r: IteratorResult<T>) => void;
  private closed = false;
  private held = 0;

  constructor(
    private readonly onReturn?: () => void,
    private readonly weigh: (item: T) => number = () => 1,
  ) {}

  get weight(): number {
    return this.held;
  }

  push(item: T): void {
    if (this.closed) return;
    if (this.waiting) {
      const w = this.waiting;
      this.waiting = undefined;
      w({ value: item, done: false });
    } else {
      this.items.push(item);
      this.held += this.weigh(item);
    }
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
        if (item !== undefined) {
          this.held -= this.weigh(item);
          return Promise.resolve({ value: item, done: false });
        }
        if (this.closed) return Promise.resolve({ value: undefined, done: true });
        return new Promise((resolve) => (this.waiting = resolve));
      },
      return: () => {
        this.closed = true;
        this.items.length = 0;
        this.held = 0;
        this.onReturn?.();
        return Promise.resolve({ value: undefined, done: true });
      },
    };
  }
}
