// GroupCommit: what arrives while a batch is being written goes in the next one, and every
// caller gets its own answer (or the batch's error).
import { describe, expect, it } from 'vitest';
import { GroupCommit } from '../../src/store/cluster/group-commit.js';

describe('GroupCommit', () => {
  it('batches what queued behind the running write; answers each caller in order', async () => {
    const batches: number[][] = [];
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const g = new GroupCommit<number, string>(async (items) => {
      batches.push(items);
      if (batches.length === 1) await gate;
      return items.map((i) => `#${i}`);
    });
    const first = g.add(1);
    const rest = [2, 3, 4].map((i) => g.add(i));
    release();
    expect(await Promise.all([first, ...rest])).toEqual(['#1', '#2', '#3', '#4']);
    expect(batches).toEqual([[1], [2, 3, 4]]);
  });

  it('a failed batch fails its callers only; the next batch is written', async () => {
    const g = new GroupCommit<number, number>(async (items) => {
      if (items.includes(13)) throw new Error('unlucky');
      return items;
    });
    const bad = g.add(13);
    await expect(bad).rejects.toThrow('unlucky');
    expect(await g.add(7)).toBe(7);
  });

  it('splits a queue longer than the batch limit', async () => {
    const sizes: number[] = [];
    const g = new GroupCommit<number, number>(async (items) => (sizes.push(items.length), items), 2);
    expect(await Promise.all([1, 2, 3, 4, 5].map((i) => g.add(i)))).toEqual([1, 2, 3, 4, 5]);
    expect(sizes).toEqual([1, 2, 2]);
  });
});
