// The admin API's wire model: what /admin/v1/* returns and what the watch stream carries.
// cubectl and cubectl-tui import these types (types only) and nothing else from the daemon.
// The internal model (src/model/) goes on this wire as it is, so these are mostly its types; a shape
// that differs on the wire is defined here and mapped at the route (src/api/admin/wire.ts), as
// src/api/e2b/wire.ts does for the E2B API: times, epoch ms in the model, are ISO 8601 here.
// Layers below the API import src/model/, never this file.
import type { KeyView as ModelKeyView } from '../model/api-key.js';
import type { EventView as ModelEventView } from '../model/event.js';
import type { NodeView as ModelNodeView } from '../model/node.js';
import type { SandboxView as ModelSandboxView, SnapshotView as ModelSnapshotView } from '../model/sandbox.js';
import type { VolumeRecord } from '../model/volume.js';
import type { Snapshot as ModelSnapshot, WatchMessage as ModelWatchMessage } from '../model/watch.js';

export type { KeyQuotas, KeyRole, KeyUsage, QuotaLimits, QuotaName } from '../model/api-key.js';
export type { AuditRecord as AuditView } from '../store/types.js';
export type { ConfigChange, ConfigOverride, ConfigView, ReloadResult } from '../model/config.js';
export type { EventKind } from '../model/event.js';
export type { DensityView, PoolView, RuleVerdict, RuntimeInfo, StoreView } from '../model/node.js';
export type { PauseOptions, SandboxLifecycle, SandboxSpecView, SandboxState, SandboxUsage, SnapshotKeeps } from '../model/sandbox.js';
export type { StatsView } from '../model/watch.js';

export interface SandboxView extends Omit<ModelSandboxView, 'startedAt' | 'endAt'> {
  /** ISO 8601. */
  startedAt: string;
  /** ISO 8601: when the sandbox will be killed unless its timeout is extended. */
  endAt: string;
}

export interface NodeView extends Omit<ModelNodeView, 'lastSeen' | 'evictAt'> {
  /** ISO 8601 of the last heartbeat/metrics update. */
  lastSeen: string;
  /** ISO 8601: a pending `drain --evict` destroys the node's sandboxes at this time. */
  evictAt?: string;
}

/** A volume: its record without its content token (in `volume get`'s answer only), its time in ISO 8601. */
export interface VolumeView extends Omit<VolumeRecord, 'createdAt' | 'token'> {
  /** ISO 8601. */
  createdAt: string;
  /** Bytes its data and metadata take; absent when its node did not say. */
  usedBytes?: number;
  /** The sandboxes that mount it (`volume get`). */
  mountedBy?: string[];
  /** The bearer token of its content API (`volume get`). */
  token?: string;
}

export interface SnapshotView extends Omit<ModelSnapshotView, 'createdAt'> {
  /** ISO 8601. */
  createdAt: string;
}

export interface EventView extends Omit<ModelEventView, 'at'> {
  /** ISO 8601. */
  at: string;
}

/** An API key (GET /admin/v1/keys): never the key or its hash. */
export interface KeyView extends Omit<ModelKeyView, 'createdAt'> {
  /** ISO 8601. */
  createdAt: string;
}

/** POST /admin/v1/keys: the new key itself, shown this once (the store keeps its hash), and its record. */
export interface NewKeyView extends KeyView {
  key: string;
}

/** How the admin wire writes each record of a snapshot and the watch. */
export interface WireShapes {
  sandbox: SandboxView;
  node: NodeView;
  event: EventView;
}

export type Snapshot = ModelSnapshot<WireShapes>;
/** One message of GET /admin/v1/watch (server-sent events; `event:` is the type). */
export type WatchMessage = ModelWatchMessage<WireShapes>;
