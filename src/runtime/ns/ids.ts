// Host ids of the `ns` runtime's sandboxes (issue 12, docs/security.md "Identity"): each sandbox
// gets a range of 65,536 host ids of its own, ids 0-65535 inside mapped onto it by a user
// namespace (native/launch/identity.c, "identity"), so root inside is not host root and `user` is
// no other sandbox's and no host account's uid: per-uid kernel limits (inotify instances,
// pending signals, message queues, process counts) and /proc/<pid> access are the sandbox's own.
// Ranges are kept in each sandbox's record (sandbox.json), so the allocator is rebuilt from the
// sandboxes found after a restart (a range of a sandbox that is gone is free again).
import { readFile } from 'node:fs/promises';
import { CubeError } from '../../errors.js';

/** cubelet identity.* defaults: each sandbox's own host ids, ranges from host id 1,000,000. */
export const DEFAULT_IDENTITY = { userns: true, hostIdBase: 1_000_000, hostIdRanges: 4096 };

/** Ids inside a sandbox that are mapped: 0-65535, as a container's. */
export const ID_RANGE = 65_536;

/** The host id files whose ids a sandbox range must not meet: accounts, groups and other subordinate ranges. */
export const HOST_ID_FILES = ['/etc/passwd', '/etc/group', '/etc/subuid', '/etc/subgid'] as const;

/** Ids the lines of /etc/passwd or /etc/group (field 3) or /etc/subuid or /etc/subgid (start and count) hold, as [first, last] (pure). */
export function hostIdSpans(file: string, text: string): [number, number][] {
  const sub = file.endsWith('subuid') || file.endsWith('subgid');
  const out: [number, number][] = [];
  for (const line of text.split('\n')) {
    if (!line.trim() || line.startsWith('#')) continue;
    const f = line.split(':');
    const first = Number(f[sub ? 1 : 2]);
    const count = sub ? Number(f[2]) : 1;
    if (Number.isInteger(first) && Number.isInteger(count) && count > 0) out.push([first, first + count - 1]);
  }
  return out;
}

export class HostIdRanges {
  private readonly used = new Set<number>();
  private next = 0;

  /** `ranges` ranges of ID_RANGE ids from host id `base`. */
  constructor(
    readonly base: number,
    readonly ranges: number,
  ) {
    if (!(Number.isInteger(base) && base > 0 && Number.isInteger(ranges) && ranges > 0 && base + ranges * ID_RANGE <= 2 ** 32 - 2)) {
      throw new CubeError('CONFIG_INVALID', `sandbox host ids: base ${base} and ${ranges} ranges of ${ID_RANGE} must lie between 1 and 2^32-2`);
    }
  }

  /** The last host id of the ranges. */
  get last(): number {
    return this.base + this.ranges * ID_RANGE - 1;
  }

  /** Refuses ranges that meet a host account's or group's id or another subordinate range (read from `files`). */
  async checkHost(files: readonly string[] = HOST_ID_FILES): Promise<void> {
    for (const file of files) {
      const text = await readFile(file, 'utf8').catch(() => '');
      const hit = hostIdSpans(file, text).find(([a, b]) => a <= this.last && b >= this.base);
      if (hit) {
        throw new CubeError('CONFIG_INVALID', `sandbox host ids ${this.base}-${this.last} meet ids ${hit[0]}-${hit[1]} of ${file}: move identity.host_id_base`);
      }
    }
  }

  /** A free range's first host id (the sandbox's root); rotates, so a range just released is not handed out again at once. */
  take(): number {
    for (let i = 0; i < this.ranges; i++) {
      const slot = (this.next + i) % this.ranges;
      if (this.used.has(slot)) continue;
      this.used.add(slot);
      this.next = (slot + 1) % this.ranges;
      return this.base + slot * ID_RANGE;
    }
    throw new CubeError('IDS_EXHAUSTED', `all ${this.ranges} sandbox host id ranges are in use (identity.host_id_ranges)`);
  }

  /** Marks the range starting at `first` (a running sandbox's, found after a restart) in use; false when it is not one of these ranges. */
  adopt(first: number): boolean {
    const slot = this.slotOf(first);
    if (slot === undefined) return false;
    this.used.add(slot);
    return true;
  }

  release(first: number): void {
    const slot = this.slotOf(first);
    if (slot !== undefined) this.used.delete(slot);
  }

  get inUse(): number {
    return this.used.size;
  }

  private slotOf(first: number): number | undefined {
    const slot = (first - this.base) / ID_RANGE;
    return Number.isInteger(slot) && slot >= 0 && slot < this.ranges ? slot : undefined;
  }
}
