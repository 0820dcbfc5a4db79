// The store's pure arithmetic and error reading (btrfs-store.ts, the layer import).

export const GIB = 1024 ** 3;

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
