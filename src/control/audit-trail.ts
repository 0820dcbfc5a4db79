// The audit trail as the API reads and adds to it: operator actions the control plane does not
// carry out itself (template imports and removals, egress rules and commands run through the
// admin API) are recorded here with the acting key, like those it does (admission.ts audit()).
import type { AuditRecord, StateStore } from '../store/types.js';
import { audited } from './admission.js';

export class AuditTrail {
  constructor(private readonly store: StateStore) {}

  /** Runs `fn` and records who did what to what, and how it ended (its error message when it throws). */
  run<T>(actor: string | undefined, action: string, target: string, fn: () => Promise<T>, detail?: Record<string, unknown>): Promise<T> {
    return audited(this.store, actor, action, target, fn, detail);
  }

  /** Newest first. */
  list(opts: { limit?: number; actor?: string } = {}): Promise<AuditRecord[]> {
    return this.store.listAudit(opts);
  }
}
