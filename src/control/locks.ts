// Per-sandbox operation locks: fenced leases in the state store. An operation on a sandbox holds
// its lock for as long as it runs; the lock's token is the fence its node calls carry.
import type { Logger } from 'pino';
import { CubeError } from '../errors.js';
import type { StateStore } from '../store/types.js';

/**
 * Per-sandbox operation lock: a lease its holder renews every OP_LEASE_MS / 3 while the
 * operation runs, so one held by a replica that was killed ends within OP_LEASE_MS (it was a
 * 60 s lock: the survivor answered busy for a minute). A holder that could not renew in time
 * (its Redis calls stalled) may overlap with the next: record writes are compare-and-set on
 * the record's generation, so the later of the two cannot overwrite with stale data, and its
 * calls to the node carry the lock's fencing token, which the node refuses once a later
 * holder's reached it (130491).
 */
const OP_LEASE_MS = 3000;
/** How long an operation waits for the lock before answering busy. */
const LOCK_WAIT_MS = 2000;

export class SandboxLocks {
  constructor(
    private readonly store: StateStore,
    private readonly log: Logger,
  ) {}

  /**
   * Runs `fn` holding the sandbox's operation lock. A short hold (a heartbeat reconciling the
   * record) is waited out; 130490 (busy) when another operation keeps it longer.
   */
  async locked<T>(sandboxID: string, fn: (fence: string) => Promise<T>): Promise<T> {
    let token = await this.store.acquireLock(sandboxID, OP_LEASE_MS);
    for (const until = Date.now() + LOCK_WAIT_MS; token === undefined && Date.now() < until;) {
      await new Promise((r) => setTimeout(r, 25));
      token = await this.store.acquireLock(sandboxID, OP_LEASE_MS);
    }
    if (token === undefined) throw new CubeError('SANDBOX_BUSY', `sandbox ${sandboxID} has another operation in progress`, { retryAfter: 1 });
    return this.holding(sandboxID, token, fn);
  }

  /** Like locked(), but a held lock means "skip": the holder writes the outcome. */
  async withLock(sandboxID: string, fn: (fence: string) => Promise<void>): Promise<void> {
    const token = await this.store.acquireLock(sandboxID, OP_LEASE_MS);
    if (token !== undefined) await this.holding(sandboxID, token, fn);
  }

  /** The lock's token, or undefined while another holds it; the caller holds it with hold(). */
  take(sandboxID: string): Promise<string | undefined> {
    return this.store.acquireLock(sandboxID, OP_LEASE_MS);
  }

  /** Runs `fn` with the lease `token` (its fence for node calls), renewing it, and releases it after. */
  private async holding<T>(sandboxID: string, token: string, fn: (fence: string) => Promise<T>): Promise<T> {
    const release = this.hold(sandboxID, token);
    try {
      return await fn(token);
    } finally {
      await release();
    }
  }

  /** Renews the lease `token` until the returned function releases it. */
  hold(sandboxID: string, token: string): () => Promise<void> {
    const renew = setInterval(() => {
      void this.store.renewLock(sandboxID, token, OP_LEASE_MS).then(
        (held) => held || this.log.warn({ sandboxID, token }, 'operation lease lapsed before the operation ended'),
        () => undefined,
      );
    }, OP_LEASE_MS / 3);
    return async () => {
      clearInterval(renew);
      // A release that fails (store away) leaves the lock to expire by its lease; the next holder's
      // token is newer, so nothing done under this one can land after it.
      await this.store.releaseLock(sandboxID, token).catch(() => undefined);
    };
  }
}
