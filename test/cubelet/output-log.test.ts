import { describe, expect, it } from 'vitest';
import { OutputLog } from '../../src/cubelet/output-log.js';

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
    expect(lines(log)).toEqual(['100 process started: bash -c x', '100 stdout a', '101 stdout other', '100 stderr warn', '100 stdout bc', '100 stdout d', '100 process ended: exit code 0']);
  });

  it('keeps the newest lines and cuts long ones, however much a process prints', () => {
    const log = new OutputLog(3, 5);
    log.output(1, 'stdout', Buffer.from('1\n2\n3\n4\n'), at);
    log.output(1, 'pty', Buffer.from('0123456789'), at);
    expect(lines(log)).toEqual(['1 stdout 3', '1 stdout 4', '1 pty 01234']);
  });
});
