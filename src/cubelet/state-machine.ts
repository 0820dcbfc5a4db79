// The sandbox state machine, pure: which state changes are legal and which operations a
// state admits. Cubelet consults it before touching the driver, so a pause during a create
// is answered 503 + Retry-After instead of racing the freezer.
import { CubeError } from '../errors.js';
import type { SandboxState } from '../model/sandbox.js';

const TRANSITIONS: Record<SandboxState, readonly SandboxState[]> = {
  creating: ['running', 'error', 'destroying'],
  running: ['pausing', 'destroying', 'error'],
  pausing: ['paused', 'running', 'error'],
  paused: ['resuming', 'destroying', 'error'],
  resuming: ['running', 'paused', 'error'],
  destroying: ['gone', 'error'],
  error: ['destroying'],
  lost: ['destroying', 'gone'],
  gone: [],
};

export function canTransition(from: SandboxState, to: SandboxState): boolean {
  return TRANSITIONS[from].includes(to);
}

export type SandboxOp = 'pause' | 'resume' | 'destroy' | 'exec' | 'files' | 'setEndAt' | 'setEgress' | 'snapshot';

export type OpVerdict = { ok: true } | { ok: false; kind: 'CONFLICT' | 'SANDBOX_BUSY' | 'NOT_FOUND'; message: string; retryAfter?: number };

const BUSY: readonly SandboxState[] = ['creating', 'pausing', 'resuming'];

/** Whether `op` may start in `state`. Transient states are busy (retry in a second); the rest is a conflict. */
export function admitOp(state: SandboxState, op: SandboxOp): OpVerdict {
  if (state === 'gone') return { ok: false, kind: 'NOT_FOUND', message: 'sandbox is gone' };
  if (state === 'destroying') return { ok: false, kind: 'CONFLICT', message: 'sandbox is being destroyed' };
  if (op === 'destroy') return { ok: true };
  if (BUSY.includes(state)) return { ok: false, kind: 'SANDBOX_BUSY', message: `sandbox is ${state}`, retryAfter: 1 };
  if (state === 'error' || state === 'lost') return { ok: false, kind: 'CONFLICT', message: `sandbox is in ${state} state` };
  switch (op) {
    case 'pause':
      return state === 'running' ? { ok: true } : { ok: false, kind: 'CONFLICT', message: `sandbox is already ${state}` };
    case 'resume':
      return state === 'paused' ? { ok: true } : { ok: false, kind: 'CONFLICT', message: `sandbox is ${state}, not paused` };
    case 'exec':
    case 'files':
      return state === 'running' ? { ok: true } : { ok: false, kind: 'CONFLICT', message: `sandbox is ${state}; resume it first` };
    case 'setEndAt':
    case 'setEgress':
    case 'snapshot':
      return { ok: true };
  }
}

/** Throws the CubeError the verdict describes. */
export function assertOp(sandboxID: string, state: SandboxState, op: SandboxOp): void {
  const v = admitOp(state, op);
  if (!v.ok) throw new CubeError(v.kind, `${op} ${sandboxID}: ${v.message}`, v.retryAfter === undefined ? {} : { retryAfter: v.retryAfter });
}
