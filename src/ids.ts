import { createHash, randomBytes, randomFillSync } from 'node:crypto';

const ALPHABET = 'abcdefghijklmnopqrstuvwxyz0123456789';

/**
 * Random bytes drawn from the CSPRNG in blocks, each handed out once (as Node's randomUUID does
 * with its cache): a create takes an id and a token, and a randomBytes call each cost 20 to 40 us
 * on this machine (1.9% of the control's CPU in the 1000-node bench), the pool 0.3 to 1.3 us.
 */
const pool = Buffer.allocUnsafe(4096);
let poolAt = pool.length;

/** The offset in `pool` of `n` fresh bytes (valid until the next call). */
function fresh(n: number): number {
  if (poolAt + n > pool.length) {
    randomFillSync(pool);
    poolAt = 0;
  }
  poolAt += n;
  return poolAt - n;
}

/** 20 characters, DNS-label safe (used in <port>-<id>.<domain> and as the sandbox hostname), starts with a letter. */
export function newSandboxID(): string {
  const at = fresh(20);
  let id = ALPHABET[pool[at]! % 26]!;
  for (let i = 1; i < 20; i++) id += ALPHABET[pool[at + i]! % 36]!;
  return id;
}

export function isSandboxID(s: string): boolean {
  return /^[a-z][a-z0-9]{19}$/.test(s);
}

/** A tag's first character: never a hex digit, so a 6-character tag never starts like a 4-hex one (and `cube<tag>*` of one form never matches a link of the other). */
const TAG_FIRST = 'ghijklmnopqrstuvwxyz';

/**
 * 6 characters naming a node's kernel objects (cube-<tag>-N netns, cube<tag>N links, cube-<tag>
 * cgroups, table cube_<tag>): about 1.2e9 values, where the 4 hex digits before (legacyNodeTag)
 * gave 65,536. The link name `cube<tag><index>` must fit IFNAMSIZ - 1 = 15 characters, which
 * leaves 5 digits of slot index (ipam MAX_SLOT_INDEX). A data dir keeps the tag it was made with
 * (src/cubelet/host-claims.ts dataDirTag), and two live daemons never hold one (the host claims).
 */
export function nodeTag(nodeID: string): string {
  let n = createHash('sha256').update(nodeID).digest().readUIntBE(0, 6);
  let tag = TAG_FIRST[n % TAG_FIRST.length]!;
  n = Math.floor(n / TAG_FIRST.length);
  for (let i = 0; i < 5; i++, n = Math.floor(n / 36)) tag += ALPHABET[n % 36]!;
  return tag;
}

/** The 4-hex tag of versions before the 6-character one: the names an upgraded data dir's kernel objects carry. */
export function legacyNodeTag(nodeID: string): string {
  return createHash('sha1').update(nodeID).digest('hex').slice(0, 4);
}

export function isNodeTag(s: string): boolean {
  return /^(?:[0-9a-f]{4}|[g-z][a-z0-9]{5})$/.test(s);
}

export function newToken(): string {
  const at = fresh(24);
  return pool.toString('hex', at, at + 24);
}

/** `snap-` and 16 characters: a kept snapshot (E2B snapshotID), also its directory name in the node's store. */
export function newSnapshotID(): string {
  const bytes = randomBytes(16);
  let id = 'snap-';
  for (const b of bytes) id += ALPHABET[b % 36]!;
  return id;
}

export function isSnapshotID(s: string): boolean {
  return /^snap-[a-z0-9]{16}$/.test(s);
}

/** A volume's id (E2B volumeID): `vol-` and 16 of [a-z0-9]. */
export function newVolumeID(): string {
  const bytes = randomBytes(16);
  let id = 'vol-';
  for (const b of bytes) id += ALPHABET[b % 36]!;
  return id;
}

export function isVolumeID(s: string): boolean {
  return /^vol-[a-z0-9]{16}$/.test(s);
}
