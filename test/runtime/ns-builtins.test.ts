import { describe, expect, it } from 'vitest';
import { parseMetadata } from '../../src/runtime/ns/metadata.js';
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

describe('metadata of cube-launch exec -X get', () => {
  it('gives one map per path, empty for a path without any', () => {
    expect(parseMetadata(Buffer.from('0\0owner\0rl\0' + '2\0step\0seven\0' + '0\0empty\0\0'), 3)).toEqual([{ owner: 'rl', empty: '' }, {}, { step: 'seven' }]);
    expect(parseMetadata(Buffer.alloc(0), 1)).toEqual([{}]);
  });
});
