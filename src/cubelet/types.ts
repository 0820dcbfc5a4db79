// The node contract. In role all the control plane calls the Cubelet object directly; in a
// cluster it calls the same interface through HTTP/JSON (src/cubelet/remote.ts), so the API
// and scheduler never know which.
import type { Readable } from 'node:stream';
import type { EventView } from '../model/event.js';
import type { NodeView } from '../model/node.js';
import type { EgressRequest, PauseOptions, SandboxLifecycle, SandboxUsage, SandboxView, SnapshotView } from '../model/sandbox.js';
import type { OutputLine } from './output-log.js';
import type { VolumeMount } from '../model/volume.js';
import type { ExecRequest, FileMetadata, FileStat, FsChange, SandboxStats, VolumeHost, WatchRequest } from '../runtime/types.js';

export interface NodeCreateRequest {
  sandboxID: string;
  templateID: string;
  cpus: number;
  memoryMiB: number;
  diskGiB: number;
  /** Absolute time (epoch ms) the sandbox is killed unless extended. */
  endAt: number;
  env: Record<string, string>;
  metadata: Record<string, string>;
  /** The sandbox's own egress rules (E2B allow_internet_access, network.allowOut/denyOut); absent: the node's defaults. */
  egress?: EgressRequest;
  lifecycle?: SandboxLifecycle;
  /** The API key (id) that asked for it. */
  owner?: string;
  /** The runtime to create it with (ns, microvm) on a node that offers several; absent: the node's default. */
  runtime?: string;
  /** Start from this snapshot kept on the node (its writable layer) rather than the bare template. */
  fromSnapshot?: string;
  /** Volumes the node holds, to mount (the control plane placed the sandbox here for them). */
  volumes?: VolumeMount[];
  /** Epoch ms: the control gives up on this node by then (sandbox.create_deadline_sec); node RPC refuses the create once it passed (rpc-wire.ts DEADLINE_HEADER). */
  deadline?: number;
}

/** What a node keeps of a snapshot it took: the view without the names the control plane gives, plus the origin's env. */
export type NodeSnapshot = Omit<SnapshotView, 'names'> & { env: Record<string, string> };

export type ProcessEvent =
  | { type: 'start'; pid: number }
  | { type: 'stdout'; data: Buffer }
  | { type: 'stderr'; data: Buffer }
  /** Output of a process started with a terminal (`pty`): stdout and stderr as the terminal shows them. */
  | { type: 'pty'; data: Buffer }
  | { type: 'end'; exitCode: number; signal?: string; oomKilled: boolean; timedOut: boolean; error?: string };

export interface ProcessInfo {
  /** Process id as the E2B protocol sees it: unique within the sandbox, never reused. */
  pid: number;
  tag?: string;
  argv: string[];
  cwd?: string;
  env: Record<string, string>;
}

export interface StartProcessRequest extends ExecRequest {
  tag?: string;
}

export interface ProcessStream {
  pid: number;
  /** Yields `start` first and exactly one `end` last. Ending the iteration early does not kill the process. */
  events: AsyncIterable<ProcessEvent>;
}

/** Node events the cubelet emits (state changes and its own notices). */
export type NodeEvent =
  { type: 'sandbox'; sandbox: SandboxView } | { type: 'sandbox.removed'; sandboxID: string } | { type: 'event'; event: Omit<EventView, 'id'> };

export interface NodeApi {
  readonly nodeID: string;
  createSandbox(req: NodeCreateRequest): Promise<SandboxView>;
  /** Idempotent: a missing sandbox is not an error. */
  destroySandbox(sandboxID: string): Promise<void>;
  pauseSandbox(sandboxID: string, opts?: PauseOptions): Promise<SandboxView>;
  resumeSandbox(sandboxID: string): Promise<SandboxView>;
  getSandbox(sandboxID: string): Promise<SandboxView | undefined>;
  listSandboxes(): Promise<SandboxView[]>;
  setEndAt(sandboxID: string, endAt: number): Promise<SandboxView>;
  /** Replaces the sandbox's own egress rules (absent fields: the node's defaults), running or paused. */
  setEgress(sandboxID: string, req: EgressRequest): Promise<SandboxView>;
  /**
   * Keeps the sandbox's state as `snapshotID` (ns: its writable layer, frozen for the moment it
   * takes), running or paused; it stays as it was. 409 when its runtime keeps no snapshots.
   */
  snapshotSandbox(sandboxID: string, snapshotID: string): Promise<NodeSnapshot>;
  /** Idempotent. */
  deleteSnapshot(snapshotID: string): Promise<void>;
  /** Ids of the snapshots the node keeps. */
  listSnapshots(): Promise<string[]>;
  /** The sandbox's address in the node's private range, for port proxying. */
  sandboxAddress(sandboxID: string): Promise<string>;

  startProcess(sandboxID: string, req: StartProcessRequest): Promise<ProcessStream>;
  /** Attach to a running process by pid or tag; the stream starts with `start`. */
  connectProcess(sandboxID: string, sel: { pid?: number; tag?: string }): Promise<ProcessStream>;
  listProcesses(sandboxID: string): Promise<ProcessInfo[]>;
  sendInput(sandboxID: string, pid: number, data: Buffer): Promise<void>;
  closeStdin(sandboxID: string, pid: number): Promise<void>;
  signalProcess(sandboxID: string, pid: number, signal: 'SIGKILL' | 'SIGTERM' | 'SIGINT'): Promise<void>;
  /** Resizes the terminal of a process started with `pty`. */
  resizeProcess(sandboxID: string, pid: number, cols: number, rows: number): Promise<void>;

  // The files API: each call acts with the permissions of `user` inside the sandbox (default 'user').
  statFile(sandboxID: string, path: string, user?: string): Promise<FileStat>;
  listDir(sandboxID: string, path: string, depth?: number, user?: string): Promise<FileStat[]>;
  readFile(sandboxID: string, path: string, user?: string): Promise<Readable>;
  writeFile(sandboxID: string, path: string, data: Readable | Buffer, user?: string): Promise<FileStat>;
  makeDir(sandboxID: string, path: string, user?: string): Promise<boolean>;
  removePath(sandboxID: string, path: string, user?: string): Promise<void>;
  movePath(sandboxID: string, from: string, to: string, user?: string): Promise<FileStat>;
  /** What the sandbox's processes printed, oldest first (a bounded ring: cubelet/output-log.ts). */
  processOutput(sandboxID: string): Promise<OutputLine[]>;
  /** envd file metadata of each path as `user` sees it (RuntimeDriver.readMetadata). */
  readMetadata(sandboxID: string, paths: string[], user?: string): Promise<FileMetadata[]>;
  /** Replaces a file's metadata (an upload does, also with none: that clears it). */
  writeMetadata(sandboxID: string, path: string, meta: FileMetadata, user?: string): Promise<void>;
  /** inotify on a directory inside the sandbox (RuntimeDriver.watch); ending the iteration removes the watch. */
  watchDir(sandboxID: string, req: WatchRequest): Promise<AsyncIterable<FsChange>>;

  /** Live use of every running and paused sandbox (the console's sandboxes view); optional: a node without it reports none. */
  sandboxUsage?(): Promise<SandboxUsage[]>;

  /** The node's volumes (in process, or over the node API: remote.ts, the schema's NodeVolumes); absent: its runtime has none. */
  readonly volumes?: VolumeHost;

  /** The sandbox's cgroup counters now (E2B getMetrics); optional: without it getMetrics answers no samples. */
  sandboxStats?(sandboxID: string): Promise<SandboxStats>;

  /**
   * Where traffic for port `port` of a sandbox goes when its address is not reachable from the
   * caller (a remote node): the node's authenticated port proxy. Absent: connect to
   * sandboxAddress() directly (role all).
   */
  portUpstream?(sandboxID: string, port: number, path: string): PortUpstream;

  /** Node metrics, density and pool levels as of now. */
  nodeView(): Promise<NodeView>;
  /**
   * A number that moves whenever the node's view (its lastSeen aside) or its sandbox list may have
   * changed. A heartbeat neither builds the view nor takes the list of a node whose number stood
   * still. Absent (a real node: its host's figures move on their own): both are taken every time.
   */
  stateVersion?(): number;
  subscribe(listener: (e: NodeEvent) => void): () => void;
}

/** An HTTP endpoint that forwards to a sandbox port: connect to host:port, send `path`, add `headers`. */
export interface PortUpstream {
  host: string;
  port: number;
  /** Request target (path and query) to send upstream. */
  path: string;
  headers: Record<string, string>;
}
