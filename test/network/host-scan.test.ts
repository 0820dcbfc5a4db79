// The shared reads of host tables (src/network/host-scan.ts): who shares which read, failures.
import { describe, expect, it } from 'vitest';
import { sharedReads } from '../../src/network/host-scan.js';

/** A read whose answers the test releases by hand; counts how many started. */
function manualRead() {
  const pending: { resolve: (v: number) => void; reject: (e: Error) => void }[] = [];
  const read = () => new Promise<number>((resolve, reject) => pending.push({ resolve, reject }));
  return { read, pending };
}
const tick = () => new Promise((r) => setImmediate(r));

describe('sharedReads', () => {
  it('gives callers that arrive before a read starts the same read', async () => {
    const m = manualRead();
    const get = sharedReads(m.read);
    const a = get();
    const b = get();
    await tick();
    expect(m.pending).toHaveLength(1);
    m.pending[0]!.resolve(1);
    expect(await Promise.all([a, b])).toEqual([1, 1]);
  });

  it('starts a new read after the running one for callers that arrive during it, never two at once', async () => {
    const m = manualRead();
    const get = sharedReads(m.read);
    const first = get();
    await tick();
    const c = get();
    const d = get();
    await tick();
    expect(m.pending).toHaveLength(1); // the second waits for the first to end
    m.pending[0]!.resolve(1);
    expect(await first).toBe(1);
    await tick();
    expect(m.pending).toHaveLength(2);
    m.pending[1]!.resolve(2);
    expect(await Promise.all([c, d])).toEqual([2, 2]);
  });

  it('hands a failure to the callers of that read only', async () => {
    const m = manualRead();
    const get = sharedReads(m.read);
    const a = get();
    await tick();
    m.pending[0]!.reject(new Error('ENOENT'));
    await expect(a).rejects.toThrow('ENOENT');
    const b = get();
    await tick();
    m.pending[1]!.resolve(3);
    expect(await b).toBe(3);
  });
});
