// Deaths: a sandbox that ended without its client asking. Its node (or the control plane, for
// the deaths it causes) says why with one of a closed set of reasons; the control plane keeps a
// tombstone of it cluster-wide (StateStore.putTombstone), so the next call on the sandbox, on any
// replica, answers "ended: <reason> at <time>" instead of a bare "not found", and the event
// history and the E2B lifecycle events carry the same reason.

/**
 * Why a sandbox ended without being asked. `vanished` is what is left when a node stopped listing a
 * sandbox and gave no reason (its notice was lost, or it came back without its data): still a
 * reason, and one a later typed report replaces (putTombstone).
 */
export const DEATH_REASONS = [
  'timeout',
  'oom',
  'init_exited',
  'vm_exited',
  'agent_silent',
  'node_lost',
  'drain_evicted',
  'not_readopted',
  'operator_killed',
  'vanished',
] as const;

export type DeathReason = (typeof DEATH_REASONS)[number];

/** What each reason means, in the operator's words (messages, docs). */
export const DEATH_MEANING: Readonly<Record<DeathReason, string>> = {
  timeout: 'its timeout was reached',
  oom: 'its init was killed for memory (OOM)',
  init_exited: 'its init process exited',
  vm_exited: "its microVM's QEMU exited",
  agent_silent: "its microVM's guest agent stopped answering (its QEMU was still there)",
  node_lost: 'its node was lost',
  drain_evicted: 'its node was drained with --evict',
  not_readopted: 'its node restarted and could not re-adopt it',
  operator_killed: 'an operator killed it (admin API, cubectl, console)',
  vanished: 'its node stopped listing it without saying why',
};

/** How long a tombstone answers for its sandbox (the contract is at least an hour). */
export const TOMBSTONE_KEEP_MS = 24 * 3600_000;

export interface Tombstone {
  sandboxID: string;
  reason: DeathReason;
  /** Epoch ms of the death. */
  at: number;
  /** The node that held the sandbox. */
  nodeID: string;
  /** The 1304xx code of the reason (src/errors.ts DEATH_ERRORS). */
  cubeCode: number;
  /** What happened, with the node's details (e.g. the guest console's last lines). */
  message: string;
  templateID?: string;
  metadata?: Record<string, string>;
  /** The API key (id) that created it. */
  owner?: string;
  /** Who caused it, for control-side deaths (an operator's key id, 'system:drain'). */
  by?: string;
}

/** What a node or the control plane reports of a death; the control plane fills in the rest from the record. */
export type DeathReport = Pick<Tombstone, 'sandboxID' | 'reason' | 'at' | 'nodeID' | 'message'> & Partial<Pick<Tombstone, 'by'>>;

export function isDeathReason(v: unknown): v is DeathReason {
  return typeof v === 'string' && (DEATH_REASONS as readonly string[]).includes(v);
}
