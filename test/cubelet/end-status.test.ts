// How a process's end reads in its log line: an OOM kill elsewhere in the sandbox while it ran is
// not its own death (an `echo` that exited 0 during a storm read "OOM-killed").
import { describe, expect, it } from 'vitest';
import { endStatus } from '../../src/cubelet/process-table.js';

describe('endStatus', () => {
  it.each([
    [{ exitCode: 0, oomKilled: false, timedOut: false }, 'exit code 0'],
    [{ exitCode: 137, signal: 'SIGKILL', oomKilled: true, timedOut: false }, 'signal SIGKILL, OOM-killed'],
    [{ exitCode: 0, oomKilled: true, timedOut: false }, 'exit code 0, an OOM kill in the sandbox meanwhile'],
    [{ exitCode: 137, signal: 'SIGKILL', oomKilled: false, timedOut: true }, 'signal SIGKILL, timed out'],
  ])('%j reads %s', (exit, text) => {
    expect(endStatus(exit)).toBe(text);
  });
});
