// A minimal typed event emitter: `on` returns the unsubscribe function.
export class TypedEmitter<Events extends Record<string, unknown>> {
  private readonly listeners = new Map<keyof Events, Set<(payload: never) => void>>();

  on<K extends keyof Events>(event: K, listener: (payload: Events[K]) => void): () => void {
    let set = this.listeners.get(event);
    if (!set) this.listeners.set(event, (set = new Set()));
    set.add(listener as (payload: never) => void);
    return () => void set.delete(listener as (payload: never) => void);
  }

  /**
   * Calls every listener. A listener that throws does not stop the others nor the emitter's
   * own work (it has already changed its state): its error surfaces as an uncaught exception
   * on the next tick, where it is loud.
   */
  protected emit<K extends keyof Events>(event: K, payload: Events[K]): void {
    for (const l of [...(this.listeners.get(event) ?? [])]) {
      try {
        (l as (p: Events[K]) => void)(payload);
      } catch (e) {
        process.nextTick(() => {
          throw e;
        });
      }
    }
  }
}
