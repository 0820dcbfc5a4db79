// Ids and tokens come from a pool of random bytes refilled in blocks (src/ids.ts): across many
// refills none is handed out twice, and each keeps its format.
import { describe, expect, it } from 'vitest';
import { isSandboxID, isSnapshotID, newSandboxID, newSnapshotID, newToken } from '../../src/ids.js';

describe('ids', () => {
  it('sandbox ids and tokens drawn across many refills of the pool are distinct and well formed', () => {
    // 3000 * (20 + 24) bytes: about 32 refills of the 4 KiB pool, interleaved as creates take them.
    const ids = new Set<string>();
    const tokens = new Set<string>();
    for (let i = 0; i < 3000; i++) {
      ids.add(newSandboxID());
      tokens.add(newToken());
      if (i % 100 === 0) expect(isSnapshotID(newSnapshotID())).toBe(true);
    }
    expect(ids.size).toBe(3000);
    expect(tokens.size).toBe(3000);
    for (const id of ids) expect(isSandboxID(id)).toBe(true);
    for (const t of tokens) expect(t).toMatch(/^[0-9a-f]{48}$/);
    // Every letter and digit shows up: the bytes are not stuck at a value (a pool never refilled).
    expect(new Set([...ids].join('')).size).toBe(36);
  });
});
