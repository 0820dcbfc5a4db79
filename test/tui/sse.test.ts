import { describe, expect, it } from 'vitest';
import { SseParser } from '../../src/tui/sse.js';
import { loadStream, toSse } from './replay.js';

describe('SseParser', () => {
  it('parses events split at every byte boundary, ignoring comments', () => {
    const text = 'event: node\ndata: {"a":1}\n\n: ping\n\ndata: x\ndata: y\nid: 7\n\n';
    for (let size = 1; size <= text.length; size++) {
      const p = new SseParser();
      const got = [];
      for (let i = 0; i < text.length; i += size) got.push(...p.push(text.slice(i, i + size)));
      expect(got).toEqual([
        { event: 'node', data: '{"a":1}' },
        { event: 'message', data: 'x\ny', id: '7' },
      ]);
    }
  });

  it('accepts CRLF and CR line ends, the CR split across chunks', () => {
    const p = new SseParser();
    expect(p.push('event: a\r')).toEqual([]);
    expect(p.push('\ndata: 1\r\n\r')).toEqual([]);
    expect(p.push('\ndata: 2\r\r')).toEqual([{ event: 'a', data: '1' }]);
    expect(p.push('\n')).toEqual([{ event: 'message', data: '2' }]);
  });

  it('round-trips the recorded stream', () => {
    const msgs = loadStream('watch-handwritten.ndjson');
    const out = new SseParser().push(toSse(msgs));
    expect(out.map((m) => m.event)).toEqual(msgs.map((m) => m.type));
    expect(out.map((m) => JSON.parse(m.data))).toEqual(msgs);
  });
});
