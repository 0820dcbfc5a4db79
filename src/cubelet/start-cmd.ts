// A template's start and ready commands: the start command runs in the background in the new
// sandbox (as a process of its table, tag `start`, so it can be listed, connected to and is
// killed with the sandbox); the sandbox counts as running once the ready command exits 0.
// The ready command is polled, each run bounded, the whole bounded by the template's timeout
// (else the caller's default); a start command that ends non-zero first fails at once. A failure
// carries the last output of both commands (what a client needs to see why).
import { once } from 'node:events';
import { CubeError } from '../errors.js';
import type { ExecProcess, ExecRequest, TemplateConfig } from '../runtime/types.js';
import type { ProcessEvent, ProcessStream, StartProcessRequest } from './types.js';

export const START_TAG = 'start';
const POLL_MS = 100;
const READY_RUN_MS = 10_000;
const TAIL_BYTES = 2048;

export interface StartCmdHooks {
  /** Starts a process in the sandbox's process table. */
  start(req: StartProcessRequest): ProcessStream;
  /** Runs a process outside the table (the ready checks). */
  exec(req: ExecRequest): ExecProcess;
  /** The ready limit when the template sets none (sandbox.ready_timeout_sec). */
  defaultReadyTimeoutSec: number;
  sleep?: (ms: number) => Promise<void>;
}

/** The last `max` bytes of a growing output (pure helper state). */
export class Tail {
  private buf = Buffer.alloc(0);
  constructor(private readonly max = TAIL_BYTES) {}
  push(b: Buffer): void {
    this.buf = Buffer.concat([this.buf, b]);
    if (this.buf.length > this.max) this.buf = this.buf.subarray(this.buf.length - this.max);
  }
  toString(): string {
    return this.buf.toString('utf8');
  }
}

/** Runs `config.startCmd` and waits for `config.readyCmd`; throws TEMPLATE_START_FAILED with the output tail. */
export async function runStartCommand(config: TemplateConfig, hooks: StartCmdHooks): Promise<{ pid: number; readyAfterMs: number }> {
  if (!config.startCmd) throw new CubeError('INTERNAL', 'runStartCommand without a start command');
  const t0 = Date.now();
  const sleep = hooks.sleep ?? ((ms: number) => new Promise<void>((r) => setTimeout(r, ms)));
  const as = { user: config.user || 'user', ...(config.workdir ? { cwd: config.workdir } : {}) };
  const proc = hooks.start({ argv: ['/bin/sh', '-c', config.startCmd], tag: START_TAG, ...as });
  const tail = new Tail();
  const it = proc.events[Symbol.asyncIterator]();
  let ended: Extract<ProcessEvent, { type: 'end' }> | undefined;
  let stop = false as boolean; // set by the caller's side once the sandbox is ready
  // Reads the start command's output until it ends or the sandbox is ready (then stops
  // listening: the process goes on, its output no longer kept here).
  const reading = (async () => {
    while (!stop) {
      const r = await it.next();
      if (r.done) return;
      const ev = r.value;
      if (ev.type === 'stdout' || ev.type === 'stderr') tail.push(ev.data);
      else if (ev.type === 'end') ended = ev;
    }
  })();
  let last = '';
  let readyOut = new Tail();
  const fail = (why: string, extra: Record<string, unknown> = {}) => {
    const ready = config.readyCmd && last ? `; ready command's last output (${last}): ${JSON.stringify(readyOut.toString())}` : '';
    return new CubeError('TEMPLATE_START_FAILED', `${why}${ready}; start command output (last ${TAIL_BYTES} bytes): ${JSON.stringify(tail.toString())}`, {
      details: {
        startCmd: config.startCmd,
        output: tail.toString(),
        ...(config.readyCmd ? { readyCmd: config.readyCmd, readyOutput: readyOut.toString() } : {}),
        ...extra,
      },
    });
  };
  try {
    if (!config.readyCmd) return { pid: proc.pid, readyAfterMs: Date.now() - t0 };
    const timeoutMs = (config.readyTimeoutSec ?? hooks.defaultReadyTimeoutSec) * 1000;
    for (let tries = 0; ; tries++) {
      if (ended && ended.exitCode !== 0)
        throw fail(`the start command exited ${ended.exitCode}${ended.signal ? ` (${ended.signal})` : ''} before the ready command passed`, {
          exitCode: ended.exitCode,
        });
      const left = timeoutMs - (Date.now() - t0);
      if (left <= 0) throw fail(`the ready command '${config.readyCmd}' did not exit 0 within ${timeoutMs / 1000} s (tried ${tries} times)`);
      const check = hooks.exec({ argv: ['/bin/sh', '-c', config.readyCmd], timeoutMs: Math.min(READY_RUN_MS, left), ...as });
      const out = new Tail();
      check.stdout.on('data', (b: Buffer) => out.push(b));
      check.stderr.on('data', (b: Buffer) => out.push(b));
      const exit = await check.exited;
      if (exit.exitCode === 0) return { pid: proc.pid, readyAfterMs: Date.now() - t0 };
      // Its last words may still be in the pipes (bounded: a child of it may hold them open).
      await Promise.race([Promise.all([check.stdout, check.stderr].filter((r) => !r.closed).map((r) => once(r, 'close'))), sleep(POLL_MS)]);
      // A run cut short by the overall limit says less than the one before it: that one is kept.
      if (exit.timedOut && left < READY_RUN_MS && last) continue;
      last = exit.timedOut ? `timed out after ${Math.min(READY_RUN_MS, left) / 1000} s` : `exit ${exit.exitCode}`;
      readyOut = out;
      await sleep(POLL_MS);
    }
  } finally {
    stop = true;
    void it.return?.();
    // The reader's error (the stream closed under it) is what ending it means here.
    await Promise.race([reading, sleep(0)]).catch(() => undefined);
  }
}
