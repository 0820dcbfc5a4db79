// Tombstones (src/model/death.ts): the control plane keeps one for every sandbox that ended
// without its client asking, cluster-wide in the store, and answers a call on such a sandbox with
// its reason. Deaths come from the nodes (timeout, init or VM exit, not re-adopted: their
// sandbox.died notice), from the control plane's own destroys (operator kill, drain eviction), and
// from reconciling a node's list (a sandbox gone without a notice: node_lost or vanished).
import type { Logger } from 'pino';
import { CubeError, deathCode, deathError } from '../errors.js';
import { isDeathReason, type DeathReport, type Tombstone } from '../model/death.js';
import type { EventView } from '../model/event.js';
import type { SandboxRecord } from '../model/sandbox.js';
import type { StateStore } from '../store/types.js';

export interface DeathsOptions {
  store: StateStore;
  log: Logger;
  /** Appends to the event history (and tells this replica's watchers). */
  appendEvent: (e: Omit<EventView, 'id'>) => Promise<void>;
}

export class Deaths {
  constructor(private readonly o: DeathsOptions) {}

  /**
   * Keeps the tombstone of a death the control plane caused or found, and says so in the event
   * history (sandbox.died) when it is the sandbox's first reason. `rec`: the sandbox's record, for
   * its template, metadata and owner (read from the store when not given).
   */
  async bury(report: DeathReport, rec?: SandboxRecord): Promise<void> {
    const t = await this.tombstone(report, rec);
    if (!(await this.o.store.lifecycle.putTombstone(t))) return;
    await this.o.appendEvent({
      at: t.at,
      kind: 'sandbox.died',
      sandboxID: t.sandboxID,
      nodeID: t.nodeID,
      code: t.cubeCode,
      death: t.reason,
      message: t.message,
    });
  }

  /**
   * A node's sandbox.died notice (its event is appended as it came): keeps the tombstone. Called
   * before the node's list is reconciled, so the record still gives the template and metadata.
   */
  async noted(e: Omit<EventView, 'id'>): Promise<void> {
    if (e.kind !== 'sandbox.died' || e.sandboxID === undefined || !isDeathReason(e.death)) return;
    try {
      await this.o.store.lifecycle.putTombstone(
        await this.tombstone({ sandboxID: e.sandboxID, reason: e.death, at: e.at, nodeID: e.nodeID ?? '', message: e.message }),
      );
    } catch (err) {
      // The notice is appended all the same; the list's reconcile leaves a vanished tombstone at worst.
      this.o.log.warn({ err, sandboxID: e.sandboxID }, 'could not keep the tombstone of a death a node reported');
    }
  }

  /** The answer for a sandbox with no live record: its death, or 130404. */
  async notFound(sandboxID: string): Promise<CubeError> {
    const t = await this.o.store.lifecycle.getTombstone(sandboxID).catch((err: unknown) => {
      this.o.log.warn({ err, sandboxID }, 'could not read the tombstone');
      return undefined;
    });
    return t ? deathError(t) : new CubeError('NOT_FOUND', `sandbox ${sandboxID} not found`);
  }

  private async tombstone(r: DeathReport, rec?: SandboxRecord): Promise<Tombstone> {
    // Without the record the tombstone is kept all the same, only without its template and metadata.
    const known = rec ?? (await this.o.store.getSandbox(r.sandboxID).catch(() => undefined));
    return {
      ...r,
      cubeCode: deathCode(r.reason),
      ...(known ? { templateID: known.templateID, metadata: known.metadata, ...(known.owner !== undefined ? { owner: known.owner } : {}) } : {}),
    };
  }
}
