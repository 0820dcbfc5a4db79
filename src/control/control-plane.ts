// The control-plane contract the API serves (E2B REST, admin API, envd routing).
// One implementation (control/service.ts) over a StateStore and a NodeDirectory:
// role all wires it to the embedded store and its in-process cubelet (a cluster of one), role
// control to Redis + MySQL and remote nodes. Errors are CubeErrors from src/errors.ts.
import type { NodeApi } from '../cubelet/types.js';
import type { ConfigView, ReloadResult } from '../model/config.js';
import type { DeathReason } from '../model/death.js';
import type { EventView } from '../model/event.js';
import type { NodeView } from '../model/node.js';
import type { CreateSandboxRequest, EgressRequest, ListFilter, PauseOptions, SandboxRecord } from '../model/sandbox.js';
import type { Snapshot, WatchMessage } from '../model/watch.js';
import type { AuditTrail } from './audit-trail.js';
import type { KeyApi, KeyBook } from './keys.js';
import type { SnapshotApi } from './snapshots.js';
import type { VolumeApi } from './volumes.js';
import type { LifecycleApi } from './lifecycle/index.js';

/** A death the control plane causes. */
export interface ControlDeath {
  reason: Extract<DeathReason, 'operator_killed' | 'drain_evicted' | 'node_lost'>;
  message: string;
}

export interface NodeAction {
  nodeID: string;
  action: 'cordon' | 'uncordon' | 'drain' | 'delete';
  /** drain: destroy running sandboxes after `deadlineSec` instead of waiting for them. */
  evict?: boolean;
  deadlineSec?: number;
  actor?: string;
}

export interface ControlPlane {
  createSandbox(req: CreateSandboxRequest): Promise<SandboxRecord>;
  getSandbox(sandboxID: string): Promise<SandboxRecord>;
  listSandboxes(filter?: ListFilter): Promise<SandboxRecord[]>;
  /** `death`: the destroy ends it without its client asking (an operator, a drain): a tombstone says why (control/deaths.ts). */
  destroySandbox(sandboxID: string, actor?: string, death?: ControlDeath): Promise<void>;
  /** A client's delete of the sandbox was accepted and its record is gone (no death first): its owner; a repeat answers done. */
  deleteAccepted(sandboxID: string): Promise<{ owner?: string } | undefined>;
  /** `opts.release`: free the memory where the runtime can (PauseOptions). */
  pauseSandbox(sandboxID: string, actor?: string, opts?: PauseOptions): Promise<SandboxRecord>;
  /** Resumes a paused sandbox (admission by the release-ratio policy: 130409 when refused). `resumed` says whether it was paused. */
  resumeSandbox(sandboxID: string, timeoutSec?: number, actor?: string): Promise<{ sandbox: SandboxRecord; resumed: boolean }>;
  setTimeout(sandboxID: string, timeoutSec: number): Promise<SandboxRecord>;
  /** Replaces the sandbox's own egress rules (E2B PUT /sandboxes/{id}/network). */
  setEgress(sandboxID: string, req: EgressRequest): Promise<SandboxRecord>;
  /** Kept sandbox snapshots and fork (E2B createSnapshot, listSnapshots, deleteSnapshot, fork). */
  readonly snapshots: SnapshotApi;
  /** Volumes (E2B Volume.create, list, getInfo, destroy, the content API; volumeMounts at create). */
  readonly volumes: VolumeApi;
  /** API keys: made, listed, changed and removed (admin API), requests authenticated, quotas claimed. */
  readonly keys: KeyApi & Pick<KeyBook, 'authenticate' | 'knows' | 'assertRoomFor'>;
  /** The operator actions' record (who, what, when, outcome). */
  readonly audit: AuditTrail;
  /** E2B's lifecycle events and webhooks (GET /events/sandboxes, /events/webhooks). */
  readonly lifecycle: LifecycleApi;
  /** The node that holds a running sandbox (for envd traffic); 130404 when unknown. */
  nodeFor(sandboxID: string): Promise<NodeApi>;

  listNodes(): Promise<NodeView[]>;
  nodeAction(a: NodeAction): Promise<NodeView>;

  config(): ConfigView;
  reloadConfig(actor?: string): Promise<ReloadResult>;
  setConfig(path: string, value: unknown, actor?: string): Promise<ReloadResult>;

  templates(): Promise<{ templateID: string; nodes: string[] }[]>;
  events(opts?: { sinceID?: number; beforeID?: number; limit?: number }): Promise<EventView[]>;
  snapshot(): Promise<Snapshot>;
  /** Deltas after the snapshot; returns the unsubscribe function. `eventsOnly`: the listener reads events alone. */
  watch(listener: (m: WatchMessage) => void, opts?: { eventsOnly?: boolean }): () => void;
}
