// The node's events (sandbox views, notices, removals) to its listeners: the heartbeat that
// forwards them to the control plane, and in-process watchers. Notices from before anyone
// listened (a start's deaths) go to the first listener.
import type { Logger } from 'pino';
import { toCubeError } from '../errors.js';
import type { NodeEvent } from './types.js';

/** Notices kept for a first listener: a restart that lost more sandboxes than this reports the first ones. */
const MAX_UNHEARD = 1000;

export class NodeEvents {
  private readonly listeners = new Set<(e: NodeEvent) => void>();
  /** Listeners that take the notices from before anyone listened (the forwarders, not local hooks). */
  private readonly hearers = new Set<(e: NodeEvent) => void>();
  /** Notices emitted while nobody listened (start() runs before the heartbeat subscribes). */
  private readonly unheard: NodeEvent[] = [];

  constructor(private readonly log: Logger) {}

  /**
   * `backlog: false` for a local hook that wants only what comes from now on: it neither takes the
   * start's notices nor counts as someone who heard them (the template store's release of held
   * layers, subscribed before start(), took the start's deaths from the control plane, whose
   * tombstones then said `vanished` instead of `not_readopted`).
   */
  subscribe(listener: (e: NodeEvent) => void, opts: { backlog?: boolean } = {}): () => void {
    this.listeners.add(listener);
    if (opts.backlog !== false) {
      this.hearers.add(listener);
      // Notices from before anyone listened (a start's deaths): to the first listener.
      for (const e of this.unheard.splice(0)) listener(e);
    }
    return () => {
      this.listeners.delete(listener);
      this.hearers.delete(listener);
    };
  }

  emit(e: NodeEvent): void {
    if (this.hearers.size === 0 && e.type === 'event' && this.unheard.length < MAX_UNHEARD) this.unheard.push(e);
    for (const l of this.listeners) {
      try {
        l(e);
      } catch (err) {
        this.log.error({ err: toCubeError(err) }, 'node event listener failed');
      }
    }
  }
}
