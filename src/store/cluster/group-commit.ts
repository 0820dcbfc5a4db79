// Group commit: writes that arrive while one is being committed wait and go together in the next
// (one statement, one InnoDB commit for the lot). At 32 concurrent creates the audit rows, one
// commit each, were a third of the control's MySQL statements; each caller still gets its own
// answer, or the batch's error.

export class GroupCommit<T, R> {
  private queue: { item: T; resolve: (r: R) => void; reject: (e: unknown) => void }[] = [];
  private running = false;

  /** `write` commits a batch and returns one answer per item, in order. */
  constructor(
    private readonly write: (items: T[]) => Promise<R[]>,
    private readonly maxBatch = 500,
  ) {}

  add(item: T): Promise<R> {
    return new Promise<R>((resolve, reject) => {
      this.queue.push({ item, resolve, reject });
      void this.drain();
    });
  }

  private async drain(): Promise<void> {
    if (this.running) return;
    this.running = true;
    try {
      while (this.queue.length > 0) {
        const batch = this.queue.splice(0, this.maxBatch);
        try {
          const out = await this.write(batch.map((b) => b.item));
          batch.forEach((b, i) => b.resolve(out[i]!));
        } catch (e) {
          for (const b of batch) b.reject(e);
        }
      }
    } finally {
      this.running = false;
    }
  }
}
