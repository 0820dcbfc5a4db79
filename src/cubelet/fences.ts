// The highest lock fence a node accepted per sandbox (rpc-wire.ts FENCE_HEADER), kept under the
// node's data dir: a node that forgot them on restart let through a holder that stalled across
// the restart (its lease lapsed, a later holder changed the sandbox, and the stale call undid it).
// One small file per sandbox, written only when the fence rises (fenced calls are pause, resume,
// destroy and timeout changes, never creates) and removed with the sandbox.
import { mkdirSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { CubeError } from '../errors.js';
import { FENCE_HEADER, FENCED_METHODS } from './rpc-wire.js';
import type { NodeApi } from './types.js';

/** Sandbox ids as ids.ts makes them: anything else is no file name of ours. */
const SAFE_ID = /^[a-z0-9]{1,64}$/;

export class FenceBook {
  private readonly dir: string;
  private readonly highest = new Map<string, number>();

  /** `dataDir`: the node's; `live`: the sandboxes it holds now (fences of the others are dropped). */
  constructor(dataDir: string, live: Iterable<string>) {
    this.dir = join(dataDir, 'fences');
    mkdirSync(this.dir, { recursive: true, mode: 0o700 });
    const keep = new Set(live);
    for (const name of readdirSync(this.dir)) if (!keep.has(name)) rmSync(join(this.dir, name), { force: true });
  }

  /** Accepts `fence` for the sandbox and remembers it, or refuses one lower than a fence accepted before (130491). */
  check(sandboxID: string, fence: number): void {
    if (!SAFE_ID.test(sandboxID)) throw new CubeError('NOT_FOUND', `sandbox ${sandboxID} not found`);
    if (!Number.isSafeInteger(fence) || fence < 0) throw new CubeError('BAD_REQUEST', `${FENCE_HEADER}: expected a whole number, got ${JSON.stringify(fence)}`);
    const highest = this.read(sandboxID);
    if (fence < highest)
      throw new CubeError(
        'STALE_FENCE',
        `sandbox ${sandboxID}: lock fence ${fence} is older than ${highest}, which this node already accepted; another operation took the lock since (its lease lapsed)`,
      );
    if (fence === highest) return;
    this.highest.set(sandboxID, fence);
    // Renamed into place: a node killed mid-write keeps the previous fence, never half a number.
    const tmp = join(this.dir, `.${sandboxID}.tmp`);
    writeFileSync(tmp, String(fence));
    renameSync(tmp, join(this.dir, sandboxID));
  }

  /** The sandbox is gone: so is its fence. */
  forget(sandboxID: string): void {
    if (!SAFE_ID.test(sandboxID)) return;
    this.highest.delete(sandboxID);
    rmSync(join(this.dir, sandboxID), { force: true });
  }

  private read(sandboxID: string): number {
    const known = this.highest.get(sandboxID);
    if (known !== undefined) return known;
    let n = -1;
    try {
      n = Number(readFileSync(join(this.dir, sandboxID), 'utf8'));
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw e;
    }
    this.highest.set(sandboxID, n);
    return n;
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
