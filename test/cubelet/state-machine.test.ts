import { describe, expect, it } from 'vitest';
import type { SandboxState } from '../../src/api/types.js';
import { admitOp, assertOp, canTransition, type SandboxOp } from '../../src/cubelet/state-machine.js';
import { CubeError } from '../../src/errors.js';

describe('sandbox transitions', () => {
  const legal: [SandboxState, SandboxState][] = [
    ['creating', 'running'],
    ['creating', 'error'],
    ['running', 'pausing'],
    ['pausing', 'paused'],
    ['pausing', 'running'],
    ['paused', 'resuming'],
    ['resuming', 'running'],
    ['resuming', 'paused'],
    ['running', 'destroying'],
    ['paused', 'destroying'],
    ['destroying', 'gone'],
    ['destroying', 'error'],
    ['error', 'destroying'],
    ['running', 'error'],
  ];
  const illegal: [SandboxState, SandboxState][] = [
    ['creating', 'paused'],
    ['running', 'paused'],
    ['paused', 'running'],
    ['gone', 'running'],
    ['destroying', 'running'],
    ['error', 'running'],
    ['creating', 'gone'],
  ];
  it.each(legal)('%s -> %s is legal', (a, b) => expect(canTransition(a, b)).toBe(true));
  it.each(illegal)('%s -> %s is illegal', (a, b) => expect(canTransition(a, b)).toBe(false));
});

describe('operations admitted per state', () => {
  const table: [SandboxState, SandboxOp, 'ok' | 'CONFLICT' | 'SANDBOX_BUSY' | 'NOT_FOUND'][] = [
    ['running', 'pause', 'ok'],
    ['paused', 'pause', 'CONFLICT'],
    ['pausing', 'pause', 'SANDBOX_BUSY'],
    ['creating', 'pause', 'SANDBOX_BUSY'],
    ['paused', 'resume', 'ok'],
    ['running', 'resume', 'CONFLICT'],
    ['resuming', 'resume', 'SANDBOX_BUSY'],
    ['running', 'exec', 'ok'],
    ['paused', 'exec', 'CONFLICT'],
    ['creating', 'exec', 'SANDBOX_BUSY'],
    ['error', 'exec', 'CONFLICT'],
    ['running', 'destroy', 'ok'],
    ['creating', 'destroy', 'ok'],
    ['error', 'destroy', 'ok'],
    ['destroying', 'destroy', 'CONFLICT'],
    ['gone', 'destroy', 'NOT_FOUND'],
    ['paused', 'files', 'CONFLICT'],
    ['running', 'files', 'ok'],
    ['paused', 'setEndAt', 'ok'],
  ];
  it.each(table)('%s admits %s: %s', (state, op, want) => {
    const v = admitOp(state, op);
    expect(v.ok ? 'ok' : v.kind).toBe(want);
  });
  it('busy answers carry Retry-After', () => {
    try {
      assertOp('sbx', 'pausing', 'resume');
      expect.unreachable();
    } catch (e) {
      expect(e).toBeInstanceOf(CubeError);
      expect((e as CubeError).http).toBe(503);
      expect((e as CubeError).retryAfter).toBe(1);
    }
  });
});
