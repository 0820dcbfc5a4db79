// Group commit of nftables scripts (src/network/nft-batch.ts) with a recording runner.
import { describe, expect, it } from 'vitest';
import { NftBatch } from '../../src/network/nft-batch.js';

function recorder(fail: (script: string) => boolean = () => false) {
  const runs: string[] = [];
  let release: (() => void) | undefined;
  let gate = new Promise<void>((r) => (release = r));
  const run = async (script: string) => {
    runs.push(script);
    await gate;
    if (fail(script)) throw new Error(`refused: ${script.trim()}`);
  };
  return { runs, run, open: () => release!(), reset: () => (gate = new Promise<void>((r) => (release = r))) };
}

describe('NftBatch', () => {
  it('runs the first script at once and everything queued meanwhile as one transaction, in order', async () => {
    const r = recorder();
    const b = new NftBatch(r.run);
    const first = b.apply('a\n');
    const rest = [b.apply('b\n'), b.apply(() => 'c\n'), b.apply('d\n')];
    r.open();
    await Promise.all([first, ...rest]);
    expect(r.runs).toEqual(['a\n', 'b\nc\nd\n']);
    expect(b.transactions).toBe(2);
  });

  it('renders a function script when its group runs, after what was queued before it', async () => {
    const r = recorder();
    const b = new NftBatch(r.run);
    let state = 'old';
    const first = b.apply('x\n');
    const later = b.apply(() => `table ${state}\n`);
    state = 'new';
    r.open();
    await Promise.all([first, later]);
    expect(r.runs[1]).toBe('table new\n');
  });

  it('retries a failed group script by script: only the bad one is rejected', async () => {
    const r = recorder((s) => s.includes('bad'));
    r.open();
    const b = new NftBatch(r.run);
    const block = b.apply('first\n');
    const good = b.apply('good\n');
    const bad = b.apply('bad\n');
    const good2 = b.apply('good2\n');
    await block;
    await expect(good).resolves.toBeUndefined();
    await expect(bad).rejects.toThrow(/refused: bad/);
    await expect(good2).resolves.toBeUndefined();
    expect(r.runs).toEqual(['first\n', 'good\nbad\ngood2\n', 'good\n', 'bad\n', 'good2\n']);
  });
});
