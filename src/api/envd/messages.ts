// envd messages in their protobuf-JSON form (lowerCamelCase fields, base64 bytes, enum
// names, int64 as strings), converted to and from what NodeApi speaks. Pure.
import path from 'node:path/posix';
import type { ProcessEvent, ProcessInfo } from '../../cubelet/types.js';
import type { FileStat } from '../../runtime/types.js';
import { SANDBOX_USERS, isSandboxUser } from '../../runtime/templates.js';
import { ConnectError } from './connect.js';

export const DEFAULT_USER = 'user';

export function homeOf(user: string): string {
  if (!isSandboxUser(user)) throw new ConnectError('unauthenticated', `unknown user ${JSON.stringify(user)}: the sandbox has "user" and "root"`);
  return SANDBOX_USERS[user].home;
}

/** The user an RPC runs as: `Authorization: Basic base64(user:)`, else the default user. */
export function userFromAuthorization(header: string | undefined): string {
  if (!header) return DEFAULT_USER;
  const m = /^Basic\s+(\S+)$/i.exec(header.trim());
  if (!m) throw new ConnectError('unauthenticated', 'Authorization must be Basic base64("<user>:")');
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

const TYPE_NAMES: Record<FileStat['type'], string> = {
  file: 'FILE_TYPE_FILE',
  dir: 'FILE_TYPE_DIRECTORY',
  symlink: 'FILE_TYPE_SYMLINK',
  other: 'FILE_TYPE_UNSPECIFIED',
};

/** `ls -l` style permission string, as envd reports it (Go's FileMode.String()). */
export function permissionString(type: FileStat['type'], mode: number): string {
  const lead = type === 'dir' ? 'd' : type === 'symlink' ? 'L' : '-';
  const rwx = 'rwxrwxrwx';
  let s = '';
  for (let i = 0; i < 9; i++) s += mode & (1 << (8 - i)) ? rwx[i] : '-';
  return lead + s;
}

export interface EntryInfoJson {
  name: string;
  type: string;
  path: string;
  size: string;
  mode: number;
  permissions: string;
  owner: string;
  group: string;
  modifiedTime: string;
  symlinkTarget?: string;
}

export function entryInfo(st: FileStat): EntryInfoJson {
  const mode = st.mode & 0o777;
  return {
    name: st.name,
    type: TYPE_NAMES[st.type],
    path: st.path,
    size: String(st.size),
    mode,
    permissions: permissionString(st.type, mode),
    owner: nameOfUid(st.uid),
    group: nameOfUid(st.gid),
    modifiedTime: st.mtime.toISOString(),
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

/** A NodeApi process event as the envd `ProcessEvent` JSON message. */
export function processEventJson(ev: ProcessEvent): { event: Record<string, unknown> } {
  switch (ev.type) {
    case 'start':
      return { event: { start: { pid: ev.pid } } };
    case 'stdout':
      return { event: { data: { stdout: ev.data.toString('base64') } } };
    case 'stderr':
      return { event: { data: { stderr: ev.data.toString('base64') } } };
    case 'pty':
      return { event: { data: { pty: ev.data.toString('base64') } } };
    case 'end': {
      const st = exitStatus(ev);
      const reasons = [ev.timedOut ? 'timed out (Connect-Timeout-Ms)' : '', ev.oomKilled ? 'killed by the out-of-memory killer' : '', ev.error ?? ''].filter(Boolean);
      const failed = st.exitCode !== 0;
      const error = failed ? [st.status, ...reasons].join(': ') : undefined;
      return { event: { end: { exitCode: st.exitCode, exited: st.exited, status: st.status, ...(error ? { error } : {}) } } };
    }
  }
}

export const KEEPALIVE_EVENT = { event: { keepalive: {} } };

export function processInfoJson(p: ProcessInfo): Record<string, unknown> {
  return {
    pid: p.pid,
    ...(p.tag !== undefined ? { tag: p.tag } : {}),
    config: { cmd: p.argv[0] ?? '', args: p.argv.slice(1), envs: p.env, ...(p.cwd !== undefined ? { cwd: p.cwd } : {}) },
  };
}

// ---- requests ----

type Json = Record<string, unknown>;

const isObject = (v: unknown): v is Json => typeof v === 'object' && v !== null && !Array.isArray(v);

export function asObject(v: unknown, what: string): Json {
  if (v === undefined || v === null) return {};
  if (!isObject(v)) throw new ConnectError('invalid_argument', `${what} must be an object`);
  return v;
}

export function str(o: Json, key: string, what: string): string | undefined {
  const v = o[key];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'string') throw new ConnectError('invalid_argument', `${what}.${key} must be a string`);
  return v;
}

export function requiredStr(o: Json, key: string, what: string): string {
  const v = str(o, key, what);
  if (v === undefined || v === '') throw new ConnectError('invalid_argument', `${what}.${key} is required`);
  return v;
}

function stringMap(v: unknown, what: string): Record<string, string> {
  const o = asObject(v, what);
  for (const [k, x] of Object.entries(o)) if (typeof x !== 'string') throw new ConnectError('invalid_argument', `${what}.${k} must be a string`);
  return o as Record<string, string>;
}

export interface StartRequestJson {
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

/** What a terminal of size 0 (proto3 JSON leaves zeros out: `size: {}`) gets, as a console would. */
export const DEFAULT_PTY: PtySize = { cols: 80, rows: 24 };

/** PTY `{size: {cols, rows}}`: whole numbers up to 65535; 0 or absent takes DEFAULT_PTY's. */
export function parsePty(v: unknown, what: string): PtySize {
  const size = asObject(asObject(v, what).size, `${what}.size`);
  const cols = Number(size.cols ?? 0);
  const rows = Number(size.rows ?? 0);
  if (![cols, rows].every((n) => Number.isInteger(n) && n >= 0 && n < 65536)) {
    throw new ConnectError('invalid_argument', `${what}.size needs cols and rows from 0 to 65535 (got ${JSON.stringify(size.cols)}x${JSON.stringify(size.rows)})`);
  }
  return { cols: cols || DEFAULT_PTY.cols, rows: rows || DEFAULT_PTY.rows };
}

export function parseStartRequest(msg: unknown): StartRequestJson {
  const o = asObject(msg, 'StartRequest');
  const p = asObject(o.process, 'StartRequest.process');
  const cmd = requiredStr(p, 'cmd', 'process');
  const args = p.args ?? [];
  if (!Array.isArray(args) || args.some((a) => typeof a !== 'string')) throw new ConnectError('invalid_argument', 'process.args must be a list of strings');
  const cwd = str(p, 'cwd', 'process');
  const tag = str(o, 'tag', 'StartRequest');
  return {
    argv: [cmd, ...(args as string[])],
    env: stringMap(p.envs, 'process.envs'),
    ...(cwd ? { cwd } : {}),
    ...(tag ? { tag } : {}),
    stdin: o.stdin === true,
    ...(o.pty !== undefined && o.pty !== null ? { pty: parsePty(o.pty, 'pty') } : {}),
  };
}

/** ProcessSelector: `{pid}` or `{tag}` (the JSON form of the oneof). */
export function parseSelector(v: unknown): { pid?: number; tag?: string } {
  const o = asObject(v, 'process');
  if (o.pid !== undefined) {
    const pid = Number(o.pid);
    if (!Number.isInteger(pid) || pid <= 0) throw new ConnectError('invalid_argument', 'process.pid must be a positive integer');
    return { pid };
  }
  const tag = str(o, 'tag', 'process');
  if (tag) return { tag };
  throw new ConnectError('invalid_argument', 'process selector needs pid or tag');
}

const SIGNALS: Record<string, 'SIGKILL' | 'SIGTERM'> = { SIGNAL_SIGKILL: 'SIGKILL', '9': 'SIGKILL', SIGNAL_SIGTERM: 'SIGTERM', '15': 'SIGTERM' };

/** The Signal enum arrives as a name or a number. */
export function parseSignal(v: unknown): 'SIGKILL' | 'SIGTERM' {
  const s = SIGNALS[String(v)];
  if (!s) throw new ConnectError('invalid_argument', `unsupported signal ${JSON.stringify(v)}: SIGNAL_SIGKILL or SIGNAL_SIGTERM`);
  return s;
}

/** ProcessInput: `{stdin: base64}` or `{pty: base64}` (both go to the process's input: its pipe, or its terminal). */
export function parseInput(v: unknown): Buffer {
  const o = asObject(v, 'input');
  const data = o.stdin ?? o.pty;
  if (typeof data === 'string') return Buffer.from(data, 'base64');
  throw new ConnectError('invalid_argument', 'input.stdin or input.pty is required');
}

export function parseDepth(v: unknown): number {
  if (v === undefined || v === null) return 1;
  const d = Number(v);
  if (!Number.isInteger(d) || d < 0) throw new ConnectError('invalid_argument', 'depth must be a non-negative integer');
  return d === 0 ? 1 : d;
}
