// The store's pure facts (where it is, its sizes, what its errors mean): read by modules that must
// not load the store itself (a control replica's template catalog reads the layers path).
import { join } from 'node:path';

export const GIB = 1024 ** 3;

/** The store refuses new subvolumes below this much free space: btrfs needs room for metadata to even delete. */
export const STORE_MIN_FREE_BYTES = 256 * 1024 ** 2;

/** Where a data dir's store is (mounted or not), and the template layers in it (templates/store.ts layersRoot says why). */
export const storePath = (dataDir: string): string => join(dataDir, 'store');
export const storeLayersPath = (dataDir: string): string => join(storePath(dataDir), 'layers');

export const mib = (b: number): number => Math.floor(b / 1024 ** 2);

/** The image size for `imageGiB` (0 = half of `freeBytes`, at least 1 GiB), in bytes (pure). */
export function imageBytes(imageGiB: number, freeBytes: number): number {
  if (imageGiB > 0) return Math.floor(imageGiB * GIB);
  return Math.max(GIB, Math.floor(freeBytes / 2 / GIB) * GIB);
}

/** df's used percent of a statfs answer (pure). */
export function usedPercentOf(s: { blocks: number; bfree: number; bavail: number }): number {
  const used = s.blocks - s.bfree;
  const denom = used + s.bavail;
  return denom > 0 ? Math.round((used / denom) * 1000) / 10 : 0;
}

/** Whether a helper's failure says the filesystem or a quota is full (pure). */
export function isFullError(stderr: string): boolean {
  return /No space left on device|Disk quota exceeded/.test(stderr);
}
