// The admin API's wire model: what /admin/v1/* returns and what the watch stream carries.
// cubectl and cubectl-tui import these types (types only) and nothing else from the daemon.
// The internal model (src/model/) goes on this wire as it is, so these are its types; a shape that
// ever differs on the wire is defined here and mapped at the route, as src/api/e2b/wire.ts does
// for the E2B API. Layers below the API import src/model/, never this file.
export type { ConfigChange, ConfigOverride, ConfigView, ReloadResult } from '../model/config.js';
export type { EventKind, EventView } from '../model/event.js';
export type { DensityView, NodeView, PoolView, RuntimeInfo, StoreView } from '../model/node.js';
export type { PauseOptions, SandboxLifecycle, SandboxSpecView, SandboxState, SandboxView, SnapshotKeeps, SnapshotView } from '../model/sandbox.js';
export type { Snapshot, StatsView, WatchMessage } from '../model/watch.js';
