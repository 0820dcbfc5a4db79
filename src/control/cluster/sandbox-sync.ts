// Reconciling the records of one node with the sandboxes the node says it holds (pure). The
// node is the one writer of a sandbox's state; the records keep what only the control plane
// knows (access token, env). Level-triggered, so a missed heartbeat or a control replica that
// died mid-operation is repaired by the next heartbeat.
import type { SandboxRecord, SandboxView } from '../../model/sandbox.js';

export type SyncAction =
  /** The node's view differs from the record: write the merged record. */
  | { type: 'update'; rec: SandboxRecord }
  /** On the node, not in the live records: adopt it, unless the history says it was deleted (then destroy it). */
  | { type: 'unknown'; view: SandboxView }
  /** In the records, no longer on the node: the record goes (history keeps it). */
  | { type: 'gone'; rec: SandboxRecord }
  /** Made, but its create's answer was never delivered past its deadline (`createBy` still on a made sandbox): undone. */
  | { type: 'unanswered'; rec: SandboxRecord };

/**
 * `records`: live records placed on this node; `onNode`: the node's list, taken at `listedAt`
 * on the node's clock (undefined: an older node that does not say). A record written from a node
 * answer the node gave after that (`nodeAt` >= `listedAt`) is newer than the list and left alone,
 * so a list taken mid-create never turns a running sandbox back into `creating`. A record still
 * `creating` before its deadline (`createBy`; records without one: `creatingGraceMs` after their
 * start) may not be on the node yet and is left alone too.
 * A made sandbox without a key whose record still carries `createBy` past it was never answered
 * (its replica died between the record and the answer): 'unanswered', whatever the list's age.
 * The caller writes the actions with compare-and-set on the records' generations, so a record
 * changed after `records` was read is not overwritten either.
 */
export function syncNodeSandboxes(records: SandboxRecord[], onNode: SandboxView[], now: number, creatingGraceMs: number, listedAt?: number): SyncAction[] {
  const newer = (r: SandboxRecord) => listedAt !== undefined && r.nodeAt !== undefined && r.nodeAt >= listedAt;
  const byID = new Map(records.map((r) => [r.sandboxID, r]));
  const out: SyncAction[] = [];
  for (const view of onNode) {
    const rec = byID.get(view.sandboxID);
    byID.delete(view.sandboxID);
    if (!rec) {
      out.push({ type: 'unknown', view });
      continue;
    }
    if (rec.state !== 'creating' && rec.createBy !== undefined && !rec.keyed && now > rec.createBy) {
      out.push({ type: 'unanswered', rec });
      continue;
    }
    if (newer(rec)) continue;
    // A `creating` record settled from the list is undone (no key) or adopted (keyed: its key's
    // next create returns it): either way no answer is awaited, and its mark goes. Kept, it
    // undid 5 adopted keyed sandboxes at their deadline in the cluster test's kill -9.
    const { reason: _r, createBy: _c, ...kept } = rec;
    const merged: SandboxRecord = {
      ...kept,
      ...(rec.state === 'creating' || rec.createBy === undefined ? {} : { createBy: rec.createBy }),
      ...view,
      accessToken: rec.accessToken,
      envVars: rec.envVars,
    };
    if (!sameView(merged, rec)) out.push({ type: 'update', rec: listedAt === undefined ? merged : { ...merged, nodeAt: listedAt } });
  }
  for (const rec of byID.values()) {
    if (newer(rec)) continue;
    // Before its deadline the create may still be under way (records of older versions: the grace).
    if (rec.state === 'creating' && now <= (rec.createBy ?? rec.startedAt + creatingGraceMs)) continue;
    out.push({ type: 'gone', rec });
  }
  return out;
}

// diskUsedBytes: the node updates it in steps (cubelet.ts), so a writer costs a record write per step,
// not per heartbeat; without it `cubectl sandbox ls` showed no disk use once role all read records.
const KEYS = ['state', 'reason', 'endAt', 'ip', 'nodeID', 'startedAt', 'diskUsedBytes'] as const;

function sameView(a: SandboxRecord, b: SandboxRecord): boolean {
  return KEYS.every((k) => a[k] === b[k]);
}
