import { describe, expect, it } from 'vitest';
import { parseRecords } from '../../src/runtime/ns/watch.js';

describe('watch records of cube-launch exec -W', () => {
  it('splits NUL-ended records, keeps an incomplete tail, names relative paths', () => {
    const all = Buffer.from('S\0Ca b\0Wsub/数据\0Rx\0Nx\0My\0O\0Cpart', 'utf8');
    for (let cut = 0; cut <= all.length; cut++) {
      const first = parseRecords(all.subarray(0, cut));
      const second = parseRecords(Buffer.concat([first.rest, all.subarray(cut)]));
      expect([...first.records, ...second.records]).toEqual([
        { type: 'ready', name: '' },
        { type: 'create', name: 'a b' },
        { type: 'write', name: 'sub/数据' },
        { type: 'remove', name: 'x' },
        { type: 'rename', name: 'x' },
        { type: 'chmod', name: 'y' },
        { type: 'overflow', name: '' },
      ]);
      expect(second.rest.toString()).toBe('Cpart');
    }
  });
});
