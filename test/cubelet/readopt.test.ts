// Restart re-adoption's decisions (src/cubelet/readopt.ts), as tables: which sandboxes the kernel
// still holds are candidates, whose agent must answer first, and the reason each one removed gets.
import { describe, expect, it } from 'vitest';
import { AGENT_ANSWER_MS, candidates, mustAnswer, notReadopted, type Found, type Scanned } from '../../src/cubelet/readopt.js';
import { agentSilence } from '../../src/cubelet/deaths.js';
import type { SandboxMeta } from '../../src/cubelet/meta.js';

const A = 'a0000000000000000001';
const B = 'b0000000000000000002';
const C = 'c0000000000000000003';

function meta(sandboxID: string, paused = false): SandboxMeta {
  return {
    sandboxID,
    templateID: 'base',
    spec: { cpus: 1, memoryMiB: 256, diskGiB: 1 },
    slotIndex: 3,
    startedAt: 0,
    endAt: 1,
    metadata: {},
    env: {},
    paused,
  };
}

function scanned(sandboxID: string, m: SandboxMeta | undefined, alive: boolean): Scanned {
  return { h: { sandboxID, initPid: 100, dir: `/data/${sandboxID}` }, meta: m, alive };
}

const found = (sandboxID: string, paused = false): Found => ({ h: { sandboxID, initPid: 100, dir: `/data/${sandboxID}` }, meta: meta(sandboxID, paused) });

describe('candidates: what the kernel holds that may be taken back', () => {
  it.each([
    ['a record naming it and an init alive', scanned(A, meta(A), true), true],
    ['no record (a create cut short before it wrote one)', scanned(A, undefined, true), false],
    ["a record naming another sandbox (a directory's record replaced)", scanned(A, meta(B), true), false],
    ['its init gone', scanned(A, meta(A), false), false],
    ['a warm sandbox (nobody claimed it: destroyed, its pool makes another)', scanned(A, { ...meta(A), warm: true }, true), false],
    ['a claimed warm sandbox: its record names it by its runtime id', scanned(A, { ...meta(B), runtimeID: A }, true), true],
  ])('%s', (_, s, taken) => {
    expect(candidates([s]).map((f) => f.h.sandboxID)).toEqual(taken ? [A] : []);
  });

  it('keeps the order of the scan', () => {
    expect(candidates([scanned(B, meta(B), true), scanned(A, meta(A), false), scanned(C, meta(C), true)]).map((f) => f.h.sandboxID)).toEqual([B, C]);
  });
});

describe('mustAnswer: whose agent is asked before it is taken back', () => {
  it.each([
    ['a running sandbox of a driver with agents (a microVM)', found(A), true, [A]],
    ['a paused one (QEMU stopped, or its memory in a file: it cannot answer)', found(A, true), true, []],
    ['a sandbox of a driver without agents (ns: its init is the sandbox)', found(A), false, []],
  ])('%s', (_, f, hasAgent, asked) => {
    expect(mustAnswer([f], hasAgent).map((x) => x.h.sandboxID)).toEqual(asked);
  });
});

describe('notReadopted: the reason each removed sandbox gets', () => {
  const silent = new Map([[C, agentSilence(AGENT_ANSWER_MS, 'restart')]]);
  it.each([
    [
      'a candidate whose network slot was not restored',
      A,
      [found(A)],
      'not_readopted',
      /node n1 restarted and could not re-adopt it: its network slot could not be restored/,
    ],
    ['a sandbox that was no candidate (its init died)', A, [], 'not_readopted', /its init was no longer running/],
    [
      'a microVM whose QEMU ran but whose agent did not answer',
      C,
      [],
      'agent_silent',
      /node n1: the node restarted .* guest agent did not answer a ping within 5000 ms/,
    ],
  ])('%s', (_, id, f, reason, message) => {
    const [lost, ...more] = notReadopted([id], f, silent, 'n1');
    expect(more).toEqual([]);
    expect(lost).toMatchObject({ sandboxID: id, reason });
    expect(lost!.message).toMatch(message);
  });

  it('names no tombstone for leftovers that are not sandboxes (a pool netns, a scratch dir)', () => {
    expect(notReadopted(['cube-pool-3', 'tmp.x1'], [], silent, 'n1')).toEqual([]);
  });
});
