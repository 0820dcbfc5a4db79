// The control-plane contract the API serves (E2B REST, admin API, envd routing).
// One implementation (control-plane-service.ts) over a StateStore and a NodeDirectory:
// role all wires it to the embedded store and its in-process cubelet (a cluster of one), role
// control to Redis + MySQL and remote nodes. Errors are CubeErrors from src/errors.ts.
import type { NodeApi } from '../cubelet/types.js';
import type { ConfigView, ReloadResult } from '../model/config.js';
import type { EventView } from '../model/event.js';
import type { NodeView } from '../model/node.js';
import type { ListFilter, PauseOptions, SandboxLifecycle, SandboxRecord } from '../model/sandbox.js';
import type { Snapshot, WatchMessage } from '../model/watch.js';
import type { EgressRequest } from '../network/egress.js';
import type { SnapshotApi } from './snapshots.js';

export interface CreateSandboxRequest {
  /** 'base' or absent means the configured default template. */
  templateID?: string;
  /** Seconds; absent = sandbox.default_timeout_sec. */
  timeoutSec?: number;
  cpus?: number;
  memoryMiB?: number;
  diskGiB?: number;
  metadata?: Record<string, string>;
  envVars?: Record<string, string>;
  /** The sandbox's own egress rules; absent: the node's defaults. */
  egress?: EgressRequest;
  /** What its timeout does; absent: killed. */
  lifecycle?: SandboxLifecycle;
  /** Place on this node only (console "launch on the selected node"). */
  nodeID?: string;
  /** Place only on nodes of this runtime driver (ns, microvm, sim). */
  runtime?: string;
  /** Who asked (API key id), for the audit trail. */
  actor?: string;
  /** Set by the control plane for a templateID that names a snapshot: the node starts the writable layer from it. */
  fromSnapshot?: string;
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
  destroySandbox(sandboxID: string, actor?: string): Promise<void>;
  /** `opts.release`: free the memory where the runtime can (PauseOptions). */
  pauseSandbox(sandboxID: string, actor?: string, opts?: PauseOptions): Promise<SandboxRecord>;
  /** Resumes a paused sandbox (admission by the release-ratio policy: 130409 when refused). `resumed` says whether it was paused. */
  resumeSandbox(sandboxID: string, timeoutSec?: number, actor?: string): Promise<{ sandbox: SandboxRecord; resumed: boolean }>;
  setTimeout(sandboxID: string, timeoutSec: number): Promise<SandboxRecord>;
  /** Replaces the sandbox's own egress rules (E2B PUT /sandboxes/{id}/network). */
  setEgress(sandboxID: string, req: EgressRequest): Promise<SandboxRecord>;
  /** Kept sandbox snapshots and fork (E2B createSnapshot, listSnapshots, deleteSnapshot, fork). */
  readonly snapshots: SnapshotApi;
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
