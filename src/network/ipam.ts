// IPAM: the node's CIDR cut into /30 slots. Slot i owns addresses base+4i .. base+4i+3:
// the host-side veth takes .1, the sandbox's eth0 .2 (.0 and .3 are the /30's network and
// broadcast). Index 0 is never handed out: its /30 starts at the range's network address,
// which some hosts treat as special. Pure: the kernel never sees this module.
import { CubeError } from '../errors.js';

export interface SlotAddresses {
  index: number;
  hostIp: string;
  sandboxIp: string;
  /** Always 30. */
  prefixLen: number;
}

export interface Range {
  cidr: string;
  base: number;
  prefixLen: number;
  /** Highest usable slot index (inclusive); indices run 1..maxIndex. */
  maxIndex: number;
}

const MIN_PREFIX = 8;
/**
 * Highest slot index: `cube` + a 6-character tag + the index must fit IFNAMSIZ - 1 = 15
 * characters, so 5 digits. A range wider than a /14 hands out its first 99,999 slots only.
 */
export const MAX_SLOT_INDEX = 99_999;
export const SLOT_PREFIX = 30;

function bad(msg: string): CubeError {
  return new CubeError('CONFIG_INVALID', msg);
}

export function parseIPv4(s: string): number {
  const parts = s.split('.');
  if (parts.length !== 4) throw bad(`"${s}" is not an IPv4 address`);
  let n = 0;
  for (const p of parts) {
    if (!/^\d{1,3}$/.test(p) || Number(p) > 255) throw bad(`"${s}" is not an IPv4 address`);
    n = n * 256 + Number(p);
  }
  return n;
}

export function formatIPv4(n: number): string {
  return [24, 16, 8, 0].map((shift) => Math.floor(n / 2 ** shift) % 256).join('.');
}

/** Parses and checks the pool CIDR; the error says what to write instead. */
export function parseRange(cidr: string): Range {
  const m = /^(\S+)\/(\d{1,2})$/.exec(cidr.trim());
  if (!m) throw bad(`network cidr "${cidr}" must look like 10.213.0.0/16`);
  const base = parseIPv4(m[1]!);
  const prefixLen = Number(m[2]);
  if (prefixLen < MIN_PREFIX || prefixLen > 29) {
    throw bad(`network cidr "${cidr}": prefix must be between /${MIN_PREFIX} and /29 (a /30 slot per sandbox, index 0 unused)`);
  }
  const size = 2 ** (32 - prefixLen);
  if (base % size !== 0) {
    throw bad(`network cidr "${cidr}" has host bits set; did you mean ${formatIPv4(base - (base % size))}/${prefixLen}?`);
  }
  return { cidr: `${formatIPv4(base)}/${prefixLen}`, base, prefixLen, maxIndex: Math.min(size / 4 - 1, MAX_SLOT_INDEX) };
}

export function slotAddresses(range: Range, index: number): SlotAddresses {
  if (!Number.isInteger(index) || index < 1 || index > range.maxIndex) {
    throw new CubeError('NETWORK_FAILED', `slot index ${index} is outside ${range.cidr} (1..${range.maxIndex})`);
  }
  const start = range.base + index * 4;
  return { index, hostIp: formatIPv4(start + 1), sandboxIp: formatIPv4(start + 2), prefixLen: SLOT_PREFIX };
}

/**
 * Which slot indices are taken. Lowest free index first, so a restarted node reuses the
 * same names and addresses and the kernel objects stay easy to read.
 */
export class SlotAllocator {
  private readonly taken = new Set<number>();
  /** Lowest index that may be free: everything below is taken. */
  private hint = 1;

  constructor(readonly range: Range) {}

  get capacity(): number {
    return this.range.maxIndex;
  }

  get used(): number {
    return this.taken.size;
  }

  isTaken(index: number): boolean {
    return this.taken.has(index);
  }

  /** Marks an index held by an existing object (re-adoption after a restart). */
  claim(index: number): void {
    slotAddresses(this.range, index);
    this.taken.add(index);
  }

  /** The lowest free slot; throws NETWORK_FAILED when the range is exhausted. */
  allocate(): SlotAddresses {
    for (let i = this.hint; i <= this.range.maxIndex; i++) {
      if (!this.taken.has(i)) {
        this.taken.add(i);
        this.hint = i + 1;
        return slotAddresses(this.range, i);
      }
    }
    this.hint = this.range.maxIndex + 1;
    throw this.exhaustedError();
  }

  exhaustedError(): CubeError {
    return new CubeError(
      'NETWORK_FAILED',
      `network range ${this.range.cidr} is exhausted: all ${this.range.maxIndex} slots are in use or being recycled; widen network.cidr or lower density`,
    );
  }

  free(index: number): void {
    if (this.taken.delete(index) && index < this.hint) this.hint = index;
  }
}
