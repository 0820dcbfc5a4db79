// Following a sandbox's output: the next poll asks from the last time held (inclusive), and
// only lines not held yet are appended, also when several share that millisecond.
import { describe, expect, it } from 'vitest';
import { followFrom, newOutput, outputLogLine } from '../../src/tui/actions.js';
import type { OutputLine } from '../../src/cubelet/output-log.js';

const line = (at: string, text: string): OutputLine => ({ at: `2026-12-02T06:00:0${at}Z`, pid: 3, stream: 'stdout', line: text });

describe('log follow', () => {
  it('appends what is new after the last line held, counting lines of the same millisecond', () => {
    const first = [line('1.000', 'a'), line('2.000', 'b'), line('2.000', 'c')];
    const f = followFrom('s', first);
    expect(f).toEqual({ sandboxID: 's', since: '2026-12-02T06:00:02.000Z', atSince: 2 });
    // The next answer starts at that millisecond again: b and c are held, d is new, e after it.
    const next = [line('2.000', 'b'), line('2.000', 'c'), line('2.000', 'd'), line('3.000', 'e')];
    expect(newOutput(f, next).map((l) => l.line)).toEqual(['d', 'e']);
    expect(newOutput({ sandboxID: 's', since: '', atSince: 0 }, first)).toHaveLength(3);
  });

  it('shows time, pid and stream, tabs as spaces', () => {
    expect(outputLogLine(line('1.250', 'a\tb'))).toBe('2026-12-02 06:00:01.250 [3 stdout] a    b');
  });
});
