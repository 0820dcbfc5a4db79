import { createHash, randomBytes } from 'node:crypto';

const ALPHABET = 'abcdefghijklmnopqrstuvwxyz0123456789';

/** 20 characters, DNS-label safe (used in <port>-<id>.<domain> and as the sandbox hostname), starts with a letter. */
export function newSandboxID(): string {
  const bytes = randomBytes(20);
  let id = ALPHABET[bytes[0]! % 26]!;
  for (let i = 1; i < 20; i++) id += ALPHABET[bytes[i]! % 36]!;
  return id;
}

export function isSandboxID(s: string): boolean {
  return /^[a-z][a-z0-9]{19}$/.test(s);
}

/** 4 hex characters naming a node's kernel objects (cube-<tag>-N netns, cube<tag>N links, cube-<tag> cgroups, table cube_<tag>). */
export function nodeTag(nodeID: string): string {
  return createHash('sha1').update(nodeID).digest('hex').slice(0, 4);
}

export function newToken(): string {
  return randomBytes(24).toString('hex');
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
