// The highest lock fence a node accepted per sandbox (rpc-wire.ts FENCE_HEADER), kept under the
// node's data dir: a node that forgot them on restart let through a holder that stalled across
// the restart (its lease lapsed, a later holder changed the sandbox, and the stale call undid it).
// Written only when the fence rises (fenced calls are pause, resume, destroy and timeout changes,
// never creates), into one append-only log, `fences.log`: a line `ID FENCE` per rise and `ID -`
// when the sandbox goes, the last line of an id wins. An append is one write on an open
// descriptor; a file per sandbox (until 2026-12) cost a create, a rename and an unlink on the data
// dir's filesystem per destroy, about 300 us of the event loop (strace, c=20 create-delete) and 3%
// of cubed's main thread (V8 profile). The log is rewritten with the live fences at start and
// when it holds COMPACT_RATIO times more lines than fences.
import { closeSync, mkdirSync, openSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { CubeError } from '../errors.js';
import { isAbsent } from '../fsx.js';
import { FENCE_HEADER, FENCED_METHODS } from './rpc-wire.js';
import type { NodeApi } from './types.js';

/** Sandbox ids as ids.ts makes them: anything else is no name of ours. */
const SAFE_ID = /^[a-z0-9]{1,64}$/;
const LOG = 'fences.log';
/** The log is rewritten when its lines exceed this many times its fences (and COMPACT_MIN). */
const COMPACT_RATIO = 4;
const COMPACT_MIN = 1024;

/**
 * The fences a log's text holds: the last line of each id wins, `-` forgets it. A line without its
 * newline (a node killed in the middle of an append) is not read: it could be a shorter number.
 */
export function parseFenceLog(text: string): Map<string, number> {
  const fences = new Map<string, number>();
  const lines = text.split('\n');
  lines.pop(); // after the last newline: empty, or a torn line
  for (const line of lines) {
    const m = /^([a-z0-9]{1,64}) (\d{1,15}|-)$/.exec(line);
    if (!m) continue;
    if (m[2] === '-') fences.delete(m[1]!);
    else fences.set(m[1]!, Number(m[2]));
  }
  return fences;
}

export class FenceBook {
  private readonly path: string;
  private readonly highest = new Map<string, number>();
  private fd = -1;
  private lines = 0;

  /** `dataDir`: the node's; `live`: the sandboxes it holds now (fences of the others are dropped). */
  constructor(dataDir: string, live: Iterable<string>) {
    mkdirSync(dataDir, { recursive: true, mode: 0o700 });
    this.path = join(dataDir, LOG);
    const keep = new Set(live);
    let text = '';
    try {
      text = readFileSync(this.path, 'utf8');
    } catch (e) {
      if (!isAbsent(e)) throw e;
    }
    const fences = parseFenceLog(text);
    // A data dir of before the log: a file per sandbox under fences/.
    const legacy = join(dataDir, 'fences');
    for (const name of readdirOrNone(legacy)) {
      const n = SAFE_ID.test(name) ? Number(readFileSync(join(legacy, name), 'utf8')) : NaN;
      if (Number.isSafeInteger(n) && n > (fences.get(name) ?? -1)) fences.set(name, n);
    }
    for (const [id, n] of fences) if (keep.has(id)) this.highest.set(id, n);
    this.compact();
    rmSync(legacy, { recursive: true, force: true });
  }

  /** Accepts `fence` for the sandbox and remembers it, or refuses one lower than a fence accepted before (130491). */
  check(sandboxID: string, fence: number): void {
    if (!SAFE_ID.test(sandboxID)) throw new CubeError('NOT_FOUND', `sandbox ${sandboxID} not found`);
    if (!Number.isSafeInteger(fence) || fence < 0) throw new CubeError('BAD_REQUEST', `${FENCE_HEADER}: expected a whole number, got ${JSON.stringify(fence)}`);
    const highest = this.highest.get(sandboxID) ?? -1;
    if (fence < highest)
      throw new CubeError(
        'STALE_FENCE',
        `sandbox ${sandboxID}: lock fence ${fence} is older than ${highest}, which this node already accepted; another operation took the lock since (its lease lapsed)`,
      );
    if (fence === highest) return;
    this.highest.set(sandboxID, fence);
    this.append(`${sandboxID} ${fence}\n`);
  }

  /** The sandbox is gone: so is its fence. */
  forget(sandboxID: string): void {
    if (this.highest.delete(sandboxID)) this.append(`${sandboxID} -\n`);
  }

  private append(line: string): void {
    writeSync(this.fd, line);
    if (++this.lines > Math.max(COMPACT_MIN, COMPACT_RATIO * this.highest.size)) this.compact();
  }

  /** The log rewritten with the fences held (renamed into place: a node killed meanwhile keeps the old one). */
  private compact(): void {
    const tmp = `${this.path}.tmp`;
    writeFileSync(tmp, [...this.highest].map(([id, n]) => `${id} ${n}\n`).join(''), { mode: 0o600 });
    renameSync(tmp, this.path);
    if (this.fd >= 0) closeSync(this.fd);
    this.fd = openSync(this.path, 'a', 0o600);
    this.lines = this.highest.size;
  }
}

function readdirOrNone(dir: string): string[] {
  try {
    return readdirSync(dir);
  } catch (e) {
    if (isAbsent(e)) return [];
    throw e;
  }
}

/**
 * One node call under the fence rules, wherever the call comes from (node RPC, or the control
 * plane in this process): a fenced method (FENCED_METHODS) carrying `fence` is refused when it is
 * lower than one the node accepted for the sandbox (130491); a destroy forgets the sandbox's fence.
 */
export async function underFence<T>(fences: FenceBook, method: string, sandboxID: unknown, fence: string | undefined, call: () => Promise<T>): Promise<T> {
  if (fence !== undefined && FENCED_METHODS.has(method) && typeof sandboxID === 'string') fences.check(sandboxID, Number(fence));
  const result = await call();
  if (method === 'destroySandbox' && typeof sandboxID === 'string') fences.forget(sandboxID);
  return result;
}

/** `node` as a caller holding the sandbox lock whose token is `fence` reaches it (underFence on every call). */
export function fencedNode(node: NodeApi, fences: FenceBook, fence: string | undefined): NodeApi {
  return new Proxy(node, {
    get(target, prop, receiver) {
      const v = Reflect.get(target, prop, receiver) as unknown;
      if (typeof v !== 'function') return v;
      const fn = v as (...a: unknown[]) => Promise<unknown>;
      // Fenced methods are async; the others (subscribe answers at once) pass as they are.
      if (typeof prop !== 'string' || !FENCED_METHODS.has(prop)) return fn.bind(target);
      return (...args: unknown[]) => underFence(fences, prop, args[0], fence, () => fn.apply(target, args));
    },
  });
}
