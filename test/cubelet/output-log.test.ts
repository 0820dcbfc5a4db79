import { describe, expect, it } from 'vitest';
import { OutputLog, utf8Prefix } from '../../src/cubelet/output-log.js';

const at = new Date('2026-12-01T10:00:00Z');
const lines = (log: OutputLog) => log.lines().map((l) => `${l.pid} ${l.stream} ${l.line}`);

describe('a sandbox output log', () => {
  it('cuts output into lines per process and stream, keeping an open line until its newline or the end', () => {
    const log = new OutputLog();
    log.started(100, ['bash', '-c', 'x'], at);
    log.output(100, 'stdout', Buffer.from('a\r\nb'), at);
    log.output(101, 'stdout', Buffer.from('other\n'), at);
    log.output(100, 'stderr', Buffer.from('warn\n'), at);
    log.output(100, 'stdout', Buffer.from('c\nd'), at);
    log.ended(100, 'exit code 0', at);
    expect(lines(log)).toEqual([
      '100 process started: bash -c x',
      '100 stdout a',
      '101 stdout other',
      '100 stderr warn',
      '100 stdout bc',
      '100 stdout d',
      '100 process ended: exit code 0',
    ]);
  });

  it('keeps the newest lines and cuts long ones, however much a process prints', () => {
    const log = new OutputLog(3, 5);
    log.output(1, 'stdout', Buffer.from('1\n2\n3\n4\n'), at);
    log.output(1, 'pty', Buffer.from('0123456789'), at);
    expect(lines(log)).toEqual(['1 stdout 3', '1 stdout 4', '1 pty 01234']);
  });

  it('joins a character and a CR LF split between chunks, and cuts lines by characters, not bytes', () => {
    const log = new OutputLog(10, 3);
    const euro = Buffer.from('€\r\n'); // 3 bytes of UTF-8, then CR LF
    log.output(1, 'stdout', euro.subarray(0, 2), at);
    log.output(1, 'stdout', euro.subarray(2, 4), at);
    log.output(1, 'stdout', euro.subarray(4), at);
    log.output(1, 'stdout', Buffer.from('ééééé\nab'), at);
    log.ended(1, 'exit code 0', at);
    expect(lines(log)).toEqual(['1 stdout €', '1 stdout ééé', '1 stdout ab', '1 process end']);
  });

  it('keeps only the newest lines of a chunk of many, and an open line after them', () => {
    const log = new OutputLog(1000, 2000);
    for (let i = 0; i < 50; i++) log.output(1, 'stdout', Buffer.alloc(65536, 'a'), at);
    log.output(1, 'stdout', Buffer.from(`${'x\n'.repeat(5000)}open`), at);
    const kept = log.lines();
    expect(kept.length).toBe(1000);
    expect(kept.every((l) => l.line === 'x')).toBe(true); // the 50 cut lines pushed out by the 5000 short ones
    log.ended(1, 'exit code 0', at);
    expect(
      log
        .lines()
        .slice(-2)
        .map((l) => l.line),
    ).toEqual(['open', 'ended: exit code 0']);
  });

  it('finds where the first n characters of UTF-8 end', () => {
    expect(utf8Prefix(Buffer.from('aé€😀b'), 4)).toEqual({ end: 10, full: true });
    expect(utf8Prefix(Buffer.from('aé'), 4)).toEqual({ end: 3, full: false });
    expect(utf8Prefix(Buffer.from('abc'), 3)).toEqual({ end: 3, full: true });
  });
});
