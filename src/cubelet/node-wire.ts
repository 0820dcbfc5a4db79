// The node API's messages (proto/node/cube/node/v1/node.proto, generated into gen/) as the domain
// types both sides speak (model/, runtime/types.ts, types.ts): one mapper per message, each way
// it travels. The server (rpc-server.ts) and the client (remote.ts) convert here and nowhere else.
// A string the schema carries for a closed set (a sandbox's state, a file's type) is checked
// against the set: a value this side does not know is refused, not passed on as the type.
import type { DescMessage, MessageInitShape } from '@bufbuild/protobuf';
import { Code, ConnectError } from '@connectrpc/connect';
import { CubeError, errorKindOf, toCubeError } from '../errors.js';
import type { EventView } from '../model/event.js';
import { nodeWithEpochTimes, type NodeView } from '../model/node.js';
import { SANDBOX_STATES, type EgressRequest, type SandboxLifecycle, type SandboxSpecView, type SandboxUsage, type SandboxView } from '../model/sandbox.js';
import type { VolumeMount } from '../model/volume.js';
import type { FileStat, FsChange, VolumeHost, VolumeWriteOptions } from '../runtime/types.js';
import type { OutputLine } from './output-log.js';
import type { NodeCreateRequest, NodeEvent, NodeSnapshot, ProcessEvent, ProcessInfo, StartProcessRequest } from './types.js';
import type {
  CreateSandboxRequest,
  CreateSandboxRequestSchema,
  Egress,
  EgressSchema,
  FileStat as WireFileStat,
  FileStatSchema,
  Lifecycle,
  NodeEvent as WireNodeEvent,
  NodeEventSchema,
  OutputLine as WireOutputLine,
  OutputLineSchema,
  ProcessEvent as WireProcessEvent,
  ProcessEventSchema,
  ProcessInfo as WireProcessInfo,
  ProcessInfoSchema,
  Sandbox,
  SandboxSchema,
  Snapshot,
  SnapshotSchema,
  Spec,
  StartProcessRequest as WireStartProcessRequest,
  StartProcessRequestSchema,
  Usage,
  UsageSchema,
  VolumeSetMetadataRequest,
  VolumeSetMetadataRequestSchema,
  VolumeWriteOptions as WireVolumeWriteOptions,
  VolumeWriteOptionsSchema,
  WatchEvent,
} from './gen/cube/node/v1/node_pb.js';

type Init<S extends DescMessage> = MessageInitShape<S>;

/** `v` when it is one of `allowed`; otherwise the message is refused (its sender speaks another schema). */
function oneOf<T extends string>(v: string, allowed: readonly T[], what: string): T {
  const found = allowed.find((a) => a === v);
  if (found === undefined) throw new CubeError('BAD_REQUEST', `node API: ${what} "${v}" is none of ${allowed.join(', ')}`);
  return found;
}

const opt = <K extends string, V>(k: K, v: V | undefined): { [P in K]?: V } => (v === undefined ? {} : ({ [k]: v } as { [P in K]?: V }));

const JSON_TEXT = new TextDecoder();

/** A JSON-typed field's bytes (see the schema's comments for which and why). */
export function fromJsonBytes(b: Uint8Array): unknown {
  return JSON.parse(JSON_TEXT.decode(b));
}

export function toJsonBytes(v: unknown): Uint8Array {
  return Buffer.from(JSON.stringify(v ?? null));
}

// --- sandboxes ---

const specOut = (s: SandboxSpecView): Init<typeof SandboxSchema>['spec'] => ({ cpus: s.cpus, memoryMib: s.memoryMiB, diskGib: s.diskGiB });
const specIn = (s: Spec | undefined): SandboxSpecView => ({ cpus: s?.cpus ?? 0, memoryMiB: s?.memoryMib ?? 0, diskGiB: s?.diskGib ?? 0 });

const lifecycleIn = (l: Lifecycle): SandboxLifecycle => ({ onTimeout: oneOf(l.onTimeout, ['kill', 'pause'], 'lifecycle.onTimeout'), autoResume: l.autoResume });

export function egressOut(e: EgressRequest): Init<typeof EgressSchema> {
  return {
    ...opt('allowInternet', e.allowInternet),
    ...(e.allowOut ? { allowOut: { items: e.allowOut } } : {}),
    ...(e.denyOut ? { denyOut: { items: e.denyOut } } : {}),
  };
}

export function egressIn(e: Egress): EgressRequest {
  return { ...opt('allowInternet', e.allowInternet), ...opt('allowOut', e.allowOut?.items), ...opt('denyOut', e.denyOut?.items) };
}

export function sandboxOut(v: SandboxView): Init<typeof SandboxSchema> {
  return {
    sandboxId: v.sandboxID,
    templateId: v.templateID,
    nodeId: v.nodeID,
    state: v.state,
    ...opt('reason', v.reason),
    spec: specOut(v.spec),
    metadata: v.metadata,
    startedAt: v.startedAt,
    endAt: v.endAt,
    ...opt('ip', v.ip),
    runtime: v.runtime,
    ...opt('lifecycle', v.lifecycle),
    ...opt('owner', v.owner),
    ...(v.egress ? { egress: egressOut(v.egress) } : {}),
    ...opt('diskUsedBytes', v.diskUsedBytes),
    ...(v.volumes ? { volumes: v.volumes.map(volumeMountOut) } : {}),
  };
}

export function sandboxIn(m: Sandbox): SandboxView {
  return {
    sandboxID: m.sandboxId,
    templateID: m.templateId,
    nodeID: m.nodeId,
    state: oneOf(m.state, SANDBOX_STATES, 'sandbox state'),
    ...opt('reason', m.reason),
    spec: specIn(m.spec),
    metadata: m.metadata,
    startedAt: m.startedAt,
    endAt: m.endAt,
    ...opt('ip', m.ip),
    runtime: m.runtime,
    ...(m.lifecycle ? { lifecycle: lifecycleIn(m.lifecycle) } : {}),
    ...opt('owner', m.owner),
    ...(m.egress ? { egress: egressIn(m.egress) } : {}),
    ...opt('diskUsedBytes', m.diskUsedBytes),
    ...(m.volumes.length > 0 ? { volumes: m.volumes.map(volumeMountIn) } : {}),
  };
}

const volumeMountOut = (v: VolumeMount) => ({ volumeId: v.volumeID, name: v.name, path: v.path });
const volumeMountIn = (m: { volumeId: string; name: string; path: string }): VolumeMount => ({ volumeID: m.volumeId, name: m.name, path: m.path });

export function createOut(r: NodeCreateRequest): Init<typeof CreateSandboxRequestSchema> {
  return {
    sandboxId: r.sandboxID,
    templateId: r.templateID,
    spec: { cpus: r.cpus, memoryMib: r.memoryMiB, diskGib: r.diskGiB },
    endAt: r.endAt,
    env: r.env,
    metadata: r.metadata,
    ...(r.egress ? { egress: egressOut(r.egress) } : {}),
    ...opt('lifecycle', r.lifecycle),
    ...opt('owner', r.owner),
    ...opt('runtime', r.runtime),
    ...opt('fromSnapshot', r.fromSnapshot),
    ...opt('deadline', r.deadline),
    ...(r.volumes ? { volumes: r.volumes.map(volumeMountOut) } : {}),
  };
}

export function createIn(m: CreateSandboxRequest): NodeCreateRequest {
  const spec = specIn(m.spec);
  return {
    sandboxID: m.sandboxId,
    templateID: m.templateId,
    cpus: spec.cpus,
    memoryMiB: spec.memoryMiB,
    diskGiB: spec.diskGiB,
    endAt: m.endAt,
    env: m.env,
    metadata: m.metadata,
    ...(m.egress ? { egress: egressIn(m.egress) } : {}),
    ...(m.lifecycle ? { lifecycle: lifecycleIn(m.lifecycle) } : {}),
    ...opt('owner', m.owner),
    ...opt('runtime', m.runtime),
    ...opt('fromSnapshot', m.fromSnapshot),
    ...opt('deadline', m.deadline),
    ...(m.volumes.length > 0 ? { volumes: m.volumes.map(volumeMountIn) } : {}),
  };
}

export function snapshotOut(s: NodeSnapshot): Init<typeof SnapshotSchema> {
  return {
    snapshotId: s.snapshotID,
    sandboxId: s.sandboxID,
    nodeId: s.nodeID,
    templateId: s.templateID,
    runtime: s.runtime,
    keeps: s.keeps,
    spec: specOut(s.spec),
    metadata: s.metadata,
    createdAt: s.createdAt,
    env: s.env,
  };
}

export function snapshotIn(m: Snapshot): NodeSnapshot {
  return {
    snapshotID: m.snapshotId,
    sandboxID: m.sandboxId,
    nodeID: m.nodeId,
    templateID: m.templateId,
    runtime: m.runtime,
    keeps: oneOf(m.keeps, ['filesystem', 'filesystem+memory'], 'snapshot keeps'),
    spec: specIn(m.spec),
    metadata: m.metadata,
    createdAt: m.createdAt,
    env: m.env,
  };
}

export function usageOut(u: SandboxUsage): Init<typeof UsageSchema> {
  const { sandboxID, ...figures } = u;
  return { sandboxId: sandboxID, ...figures };
}

export function usageIn(m: Usage): SandboxUsage {
  return {
    sandboxID: m.sandboxId,
    ...opt('cpuPercent', m.cpuPercent),
    memoryBytes: m.memoryBytes,
    memoryLimitBytes: m.memoryLimitBytes,
    pids: m.pids,
    ...opt('diskUsedBytes', m.diskUsedBytes),
    diskLimitBytes: m.diskLimitBytes,
    ...opt('netRxBytes', m.netRxBytes),
    ...opt('netTxBytes', m.netTxBytes),
  };
}

/** The node's view from its JSON (NodeViewJson), its times read as epoch ms where an older node wrote ISO 8601. */
export function nodeViewIn(json: Uint8Array): NodeView {
  return nodeWithEpochTimes(fromJsonBytes(json) as NodeView);
}

export function nodeEventOut(e: NodeEvent): Init<typeof NodeEventSchema> {
  switch (e.type) {
    case 'sandbox':
      return { event: { case: 'sandbox', value: sandboxOut(e.sandbox) } };
    case 'sandbox.removed':
      return { event: { case: 'sandboxRemoved', value: e.sandboxID } };
    case 'event':
      return { event: { case: 'noticeJson', value: toJsonBytes(e.event) } };
  }
}

/** undefined for an event this side does not know (a newer node's): skipped, the stream goes on. */
export function nodeEventIn(m: WireNodeEvent): NodeEvent | undefined {
  switch (m.event.case) {
    case 'sandbox':
      return { type: 'sandbox', sandbox: sandboxIn(m.event.value) };
    case 'sandboxRemoved':
      return { type: 'sandbox.removed', sandboxID: m.event.value };
    case 'noticeJson':
      return { type: 'event', event: fromJsonBytes(m.event.value) as Omit<EventView, 'id'> };
    case undefined:
      return undefined;
  }
}

// --- processes ---

export function startOut(sandboxID: string, r: StartProcessRequest): Init<typeof StartProcessRequestSchema> {
  return {
    sandboxId: sandboxID,
    argv: r.argv,
    ...opt('env', r.env),
    ...opt('cwd', r.cwd),
    ...opt('user', r.user),
    ...opt('timeoutMs', r.timeoutMs),
    ...opt('stdin', r.stdin),
    ...opt('pty', r.pty),
    ...opt('tag', r.tag),
  };
}

export function startIn(m: WireStartProcessRequest): StartProcessRequest {
  return {
    argv: m.argv,
    ...(Object.keys(m.env).length > 0 ? { env: m.env } : {}),
    ...opt('cwd', m.cwd),
    ...opt('user', m.user),
    ...opt('timeoutMs', m.timeoutMs),
    ...opt('stdin', m.stdin),
    ...(m.pty ? { pty: { cols: m.pty.cols, rows: m.pty.rows } } : {}),
    ...opt('tag', m.tag),
  };
}

export function processEventOut(e: ProcessEvent): Init<typeof ProcessEventSchema> {
  switch (e.type) {
    case 'start':
      return { event: { case: 'start', value: e.pid } };
    case 'stdout':
    case 'stderr':
    case 'pty':
      return { event: { case: e.type, value: e.data } };
    case 'end':
      return {
        event: {
          case: 'end',
          value: { exitCode: e.exitCode, ...opt('signal', e.signal), oomKilled: e.oomKilled, timedOut: e.timedOut, ...opt('error', e.error) },
        },
      };
  }
}

export function processEventIn(m: WireProcessEvent): ProcessEvent | undefined {
  const e = m.event;
  switch (e.case) {
    case 'start':
      return { type: 'start', pid: e.value };
    case 'stdout':
    case 'stderr':
    case 'pty':
      return { type: e.case, data: Buffer.from(e.value.buffer, e.value.byteOffset, e.value.byteLength) };
    case 'end': {
      const v = e.value;
      return { type: 'end', exitCode: v.exitCode, ...opt('signal', v.signal), oomKilled: v.oomKilled, timedOut: v.timedOut, ...opt('error', v.error) };
    }
    case undefined:
      return undefined;
  }
}

export const processInfoOut = (p: ProcessInfo): Init<typeof ProcessInfoSchema> => p;

export function processInfoIn(m: WireProcessInfo): ProcessInfo {
  return { pid: m.pid, ...opt('tag', m.tag), argv: m.argv, ...opt('cwd', m.cwd), env: m.env };
}

export const outputLineOut = (l: OutputLine): Init<typeof OutputLineSchema> => l;

export function outputLineIn(m: WireOutputLine): OutputLine {
  return { at: m.at, pid: m.pid, stream: oneOf(m.stream, ['stdout', 'stderr', 'pty', 'process'], 'output stream'), line: m.line };
}

// --- files ---

export function fileStatOut(s: FileStat): Init<typeof FileStatSchema> {
  return {
    name: s.name,
    path: s.path,
    type: s.type,
    size: s.size,
    mode: s.mode,
    uid: s.uid,
    gid: s.gid,
    mtimeMs: s.mtime.getTime(),
    ...opt('symlinkTarget', s.symlinkTarget),
    ...opt('atimeMs', s.atime?.getTime()),
    ...opt('ctimeMs', s.ctime?.getTime()),
  };
}

export function fileStatIn(m: WireFileStat): FileStat {
  return {
    name: m.name,
    path: m.path,
    type: oneOf(m.type, ['file', 'dir', 'symlink', 'other'], 'file type'),
    size: m.size,
    mode: m.mode,
    uid: m.uid,
    gid: m.gid,
    mtime: new Date(m.mtimeMs),
    ...opt('symlinkTarget', m.symlinkTarget),
    ...(m.atimeMs !== undefined ? { atime: new Date(m.atimeMs) } : {}),
    ...(m.ctimeMs !== undefined ? { ctime: new Date(m.ctimeMs) } : {}),
  };
}

export function watchEventIn(m: WatchEvent): FsChange | undefined {
  if (m.event.case !== 'change') return undefined;
  return { type: oneOf(m.event.value.type, ['create', 'write', 'remove', 'rename', 'chmod'], 'watch change'), name: m.event.value.name };
}

// --- volumes ---

type VolumeMetadata = Parameters<VolumeHost['setMetadata']>[2];

/** Owner and mode of what a MakeDir makes (force: its parents too). */
export function volumeOptionsOut(o: VolumeWriteOptions): Init<typeof VolumeWriteOptionsSchema> {
  return { ...opt('uid', o.uid), ...opt('gid', o.gid), ...opt('mode', o.mode), ...opt('force', o.force) };
}

export function volumeOptionsIn(m: WireVolumeWriteOptions | undefined): VolumeWriteOptions {
  return { ...opt('uid', m?.uid), ...opt('gid', m?.gid), ...opt('mode', m?.mode), ...opt('force', m?.force) };
}

/** A SetMetadata: the volume's path and the owner and mode to give it. */
export function volumeMetadataOut(volumeID: string, path: string, meta: VolumeMetadata): Init<typeof VolumeSetMetadataRequestSchema> {
  return { volumeId: volumeID, path, ...opt('uid', meta.uid), ...opt('gid', meta.gid), ...opt('mode', meta.mode) };
}

export function volumeMetadataIn(m: VolumeSetMetadataRequest): VolumeMetadata {
  return { ...opt('uid', m.uid), ...opt('gid', m.gid), ...opt('mode', m.mode) };
}

// --- errors ---

/** The error's cube code (1305xx, 1304xx) on a Connect error's metadata; its details as JSON beside it. */
export const CUBE_CODE_HEADER = 'x-cube-code';
const CUBE_DETAILS_HEADER = 'x-cube-details';

const CONNECT_CODE_OF_STATUS: Record<number, Code> = {
  400: Code.InvalidArgument,
  401: Code.Unauthenticated,
  403: Code.PermissionDenied,
  404: Code.NotFound,
  409: Code.FailedPrecondition,
  410: Code.NotFound,
  413: Code.ResourceExhausted,
  429: Code.ResourceExhausted,
  503: Code.Unavailable,
};

/** What the node answers for anything a handler throws: a CubeError keeps its code and message (CUBE_CODE_HEADER). */
export function nodeErrorOut(e: unknown): ConnectError {
  if (e instanceof ConnectError) return e;
  const err = toCubeError(e);
  const meta = new Headers({ [CUBE_CODE_HEADER]: String(err.code) });
  if (err.details) meta.set(CUBE_DETAILS_HEADER, JSON.stringify(err.details));
  return new ConnectError(err.message, CONNECT_CODE_OF_STATUS[err.http] ?? Code.Internal, meta, undefined, e);
}

/** Connect codes that say the call did not reach the node or its answer did not come back. */
const UNREACHED = new Set([Code.Unavailable, Code.Canceled, Code.DeadlineExceeded, Code.Unknown, Code.Aborted]);

/**
 * A node call's failure as the caller sees it: the CubeError the node threw (same code, message,
 * details), else 130596 for a node that could not be reached or did not answer, else the
 * protocol's own refusal (a message this schema cannot read, a method the node lacks) by its code.
 */
export function nodeErrorIn(e: unknown, unreachable: (message: string, cause: unknown) => CubeError): CubeError {
  if (e instanceof CubeError) return e;
  const ce = ConnectError.from(e);
  const kind = errorKindOf(Number(ce.metadata.get(CUBE_CODE_HEADER) ?? NaN));
  if (kind) {
    const details = ce.metadata.get(CUBE_DETAILS_HEADER);
    return new CubeError(kind, ce.rawMessage, details ? { details: JSON.parse(details) as Record<string, unknown> } : {});
  }
  if (UNREACHED.has(ce.code)) return unreachable(ce.rawMessage, e);
  if (ce.code === Code.Unimplemented || ce.code === Code.NotFound) return new CubeError('NOT_FOUND', `node API: ${ce.rawMessage}`, { cause: e });
  if (ce.code === Code.Unauthenticated) return new CubeError('UNAUTHORIZED', ce.rawMessage, { cause: e });
  if (ce.code === Code.InvalidArgument) return new CubeError('BAD_REQUEST', `node API: ${ce.rawMessage}`, { cause: e });
  return new CubeError('INTERNAL', `node API: ${ce.rawMessage}`, { cause: e });
}
