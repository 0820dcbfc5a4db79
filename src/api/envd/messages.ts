// envd messages (typed by the generated code in gen/) converted to and from what NodeApi
// speaks, with the checks the types cannot express. Pure.
import path from 'node:path/posix';
import type { ProcessEvent, ProcessInfo } from '../../cubelet/types.js';
import type { FileMetadata, FileStat } from '../../runtime/types.js';
import { SANDBOX_USERS, isSandboxUser } from '../../templates/store.js';
import { timestampFromDate } from '@bufbuild/protobuf/wkt';
import type { MessageInitShape } from '@bufbuild/protobuf';
import { Code, ConnectError } from './connect.js';
import { FileType, type EntryInfoSchema } from './gen/filesystem/filesystem_pb.js';
import {
  Signal,
  type PTY,
  type ProcessEventSchema,
  type ProcessInfoSchema,
  type ProcessInput,
  type ProcessSelector,
  type StartRequest,
} from './gen/process/process_pb.js';

export const DEFAULT_USER = 'user';

export function homeOf(user: string): string {
  if (!isSandboxUser(user)) throw new ConnectError(`unknown user ${JSON.stringify(user)}: the sandbox has "user" and "root"`, Code.Unauthenticated);
  return SANDBOX_USERS[user].home;
}

/** The user an RPC runs as: `Authorization: Basic base64(user:)`, else the default user. */
export function userFromAuthorization(header: string | undefined): string {
  if (!header) return DEFAULT_USER;
  const m = /^Basic\s+(\S+)$/i.exec(header.trim());
  if (!m) throw new ConnectError('Authorization must be Basic base64("<user>:")', Code.Unauthenticated);
  const decoded = Buffer.from(m[1]!, 'base64').toString('utf8');
  const user = decoded.split(':')[0] ?? '';
  if (user === '') return DEFAULT_USER;
  homeOf(user);
  return user;
}

/** `~` expands to the user's home; relative paths resolve against it (envd's ExpandAndResolve). */
export function resolvePath(p: string | undefined, user: string): string {
  const home = homeOf(user);
  if (p === undefined || p === '') return home;
  if (p === '~') return home;
  if (p.startsWith('~/')) return path.join(home, p.slice(2));
  return path.resolve(home, p);
}

const nameOfUid = (id: number): string => Object.entries(SANDBOX_USERS).find(([, u]) => u.uid === id)?.[0] ?? String(id);

const FILE_TYPES: Record<FileStat['type'], FileType> = {
  file: FileType.FILE,
  dir: FileType.DIRECTORY,
  symlink: FileType.SYMLINK,
  other: FileType.UNSPECIFIED,
};

/** `ls -l` style permission string, as envd reports it (Go's FileMode.String()). */
export function permissionString(type: FileStat['type'], mode: number): string {
  const lead = type === 'dir' ? 'd' : type === 'symlink' ? 'L' : '-';
  const rwx = 'rwxrwxrwx';
  let s = '';
  for (let i = 0; i < 9; i++) s += mode & (1 << (8 - i)) ? rwx[i] : '-';
  return lead + s;
}

export type EntryInfoInit = MessageInitShape<typeof EntryInfoSchema>;

export function entryInfo(st: FileStat, metadata: FileMetadata = {}): EntryInfoInit {
  const mode = st.mode & 0o777;
  return {
    metadata,
    name: st.name,
    type: FILE_TYPES[st.type],
    path: st.path,
    size: BigInt(st.size),
    mode,
    permissions: permissionString(st.type, mode),
    owner: nameOfUid(st.uid),
    group: nameOfUid(st.gid),
    modifiedTime: timestampFromDate(st.mtime),
    ...(st.symlinkTarget !== undefined ? { symlinkTarget: st.symlinkTarget } : {}),
  };
}

/** The `type` of a POST /files answer entry (envd's REST schema, not the protobuf enum). */
export function restFileType(t: FileStat['type']): string {
  return t === 'dir' ? 'directory' : t;
}

/** Go's ProcessState.String() for an exit, which the SDK shows as the CommandExitError message. */
export function exitStatus(ev: Extract<ProcessEvent, { type: 'end' }>): { exitCode: number; exited: boolean; status: string } {
  if (ev.signal) return { exitCode: -1, exited: false, status: `signal: ${signalWord(ev.signal)}` };
  return { exitCode: ev.exitCode, exited: true, status: `exit status ${ev.exitCode}` };
}

function signalWord(sig: string): string {
  const words: Record<string, string> = { SIGKILL: 'killed', SIGTERM: 'terminated', SIGINT: 'interrupt', SIGSEGV: 'segmentation fault', SIGABRT: 'aborted' };
  return words[sig] ?? sig.toLowerCase();
}

type ProcessEventInit = MessageInitShape<typeof ProcessEventSchema>;

/** A NodeApi process event as the envd `ProcessEvent` message. */
export function processEvent(ev: ProcessEvent): ProcessEventInit {
  switch (ev.type) {
    case 'start':
      return { event: { case: 'start', value: { pid: ev.pid } } };
    case 'stdout':
    case 'stderr':
    case 'pty':
      return { event: { case: 'data', value: { output: { case: ev.type, value: ev.data } } } };
    case 'end': {
      const st = exitStatus(ev);
      const reasons = [ev.timedOut ? 'timed out (Connect-Timeout-Ms)' : '', ev.oomKilled ? 'killed by the out-of-memory killer' : '', ev.error ?? ''].filter(
        Boolean,
      );
      const failed = st.exitCode !== 0;
      const error = failed ? [st.status, ...reasons].join(': ') : undefined;
      return { event: { case: 'end', value: { ...st, ...(error ? { error } : {}) } } };
    }
  }
}

export const KEEPALIVE_EVENT: ProcessEventInit = { event: { case: 'keepalive', value: {} } };

export function processInfo(p: ProcessInfo): MessageInitShape<typeof ProcessInfoSchema> {
  return {
    pid: p.pid,
    ...(p.tag !== undefined ? { tag: p.tag } : {}),
    config: { cmd: p.argv[0] ?? '', args: p.argv.slice(1), envs: p.env, ...(p.cwd !== undefined ? { cwd: p.cwd } : {}) },
  };
}

// ---- requests: typed by the codec; what remains is what the types cannot say ----

export function required(v: string, what: string): string {
  if (v === '') throw new ConnectError(`${what} is required`, Code.InvalidArgument);
  return v;
}

export interface StartOptions {
  argv: string[];
  env: Record<string, string>;
  cwd?: string;
  tag?: string;
  stdin: boolean;
  pty?: PtySize;
}

export interface PtySize {
  cols: number;
  rows: number;
}

/** What a terminal of size 0 (proto3 leaves zeros out: `size: {}`) gets, as a console would. */
export const DEFAULT_PTY: PtySize = { cols: 80, rows: 24 };

/** PTY size: up to 65535 each (a TIOCSWINSZ short); 0 or absent takes DEFAULT_PTY's. */
export function ptySize(pty: PTY, what: string): PtySize {
  const cols = pty.size?.cols ?? 0;
  const rows = pty.size?.rows ?? 0;
  if (cols > 65535 || rows > 65535) throw new ConnectError(`${what}.size needs cols and rows from 0 to 65535 (got ${cols}x${rows})`, Code.InvalidArgument);
  return { cols: cols || DEFAULT_PTY.cols, rows: rows || DEFAULT_PTY.rows };
}

export function startOptions(r: StartRequest): StartOptions {
  const p = r.process;
  const cmd = required(p?.cmd ?? '', 'process.cmd');
  return {
    argv: [cmd, ...(p?.args ?? [])],
    env: { ...p?.envs },
    ...(p?.cwd ? { cwd: p.cwd } : {}),
    ...(r.tag ? { tag: r.tag } : {}),
    stdin: r.stdin === true,
    ...(r.pty ? { pty: ptySize(r.pty, 'pty') } : {}),
  };
}

/** ProcessSelector: a pid or a tag. */
export function selector(s: ProcessSelector | undefined): { pid: number } | { tag: string } {
  const sel = s?.selector;
  if (sel?.case === 'pid' && sel.value > 0) return { pid: sel.value };
  if (sel?.case === 'tag' && sel.value !== '') return { tag: sel.value };
  throw new ConnectError('process selector needs a pid (> 0) or a tag', Code.InvalidArgument);
}

const SIGNALS: Partial<Record<Signal, 'SIGKILL' | 'SIGTERM'>> = { [Signal.SIGKILL]: 'SIGKILL', [Signal.SIGTERM]: 'SIGTERM' };

export function signalName(v: Signal): 'SIGKILL' | 'SIGTERM' {
  const s = SIGNALS[v];
  if (!s) throw new ConnectError(`unsupported signal ${(Signal[v] as string | undefined) ?? v}: SIGNAL_SIGKILL or SIGNAL_SIGTERM`, Code.InvalidArgument);
  return s;
}

/** ProcessInput: stdin or pty bytes (both go to the process's input: its pipe, or its terminal). */
export function inputBytes(v: ProcessInput | undefined): Buffer {
  const i = v?.input;
  if (i?.case === undefined) throw new ConnectError('input.stdin or input.pty is required', Code.InvalidArgument);
  return Buffer.from(i.value);
}

/** ListDir depth: 0 means 1 (the directory's own entries). */
export const listDepth = (d: number): number => (d === 0 ? 1 : d);
