// The processes started in one sandbox: E2B-style pids (unique in the sandbox, never reused),
// tags, output fanned out to every subscriber (so connectProcess can attach later, without
// replay), stdin and signals. A subscriber leaving never stops the process.
//
// A subscriber that does not read (the SDK's background handle never waited on, a reader at
// 2 KiB/s) holds at most SUBSCRIBER_MAX_BYTES: beyond, its output is dropped and counted, and it
// gets one marker line saying how much once it caught up (or at the end). Dropping, not
// backpressure: a process blocked on a full pipe because one client does not read would stall
// every other subscriber and a background server's logging. Measured before: three unread
// background commands for 20 s took cubed from 109 to 4,269 MiB, kept after the kill.
//
// Output nobody takes (every subscriber full, or none) is not read on at full speed either: the
// runtime stops reading it for UNREAD_PAUSE_MS after each such chunk (ExecProcess.pauseOutput; the
// ns runtime's launch helper holds back the rest with a credit window per stream, so one paused
// stream stalls no other job on the helper's shared pipe), and the command blocks on its pipe
// meanwhile only if it prints faster than that lets through. Measured with bench/unread-output.ts
// (three `cat /dev/zero` started through envd and never read, 30 s, then the sandbox deleted;
// cubed's VmRSS over its start): with the 1 MiB bound alone, peak +409 MiB and +166 MiB 2 s after
// the kill, cubed at 75-120% CPU (load 3.7): the V8 heap, the sandbox log's strings of every chunk
// (output-log.ts) going through the old generation at the rate cat wrote. The log cut on the bytes:
// +125 / +105 at 46-73% CPU (load 3.8-5.0); with the helper's frames parsed without a concat per
// chunk and copied when small, still read at full speed: +122 / +88 at 60-90% CPU (load 1.8),
// garbage of output dropped as fast as it came; with the pause: +53 / +3 to +8, cubed at 1-8% CPU
// after the first second and the helper at 0-1% (three runs, load 2.1-5.1, one beside three CPU
// hogs). docs/benchmarks.md has the table. Dropping stays for what does go through.
import type { Readable } from 'node:stream';
import type { ExecProcess, ExitInfo } from '../runtime/types.js';
import type { ProcessEvent, ProcessInfo, ProcessStream, StartProcessRequest } from './types.js';
import { CubeError } from '../errors.js';
import { AsyncQueue } from './async-queue.js';
import { OutputLog } from './output-log.js';

/** Output one subscriber may hold unread; with MAX_SUBSCRIBERS, what a process's output can cost cubed. */
export const SUBSCRIBER_MAX_BYTES = 1024 ** 2;
/** Subscribers (the start's and connectProcess's) of one process at a time. */
export const MAX_SUBSCRIBERS = 8;
/**
 * How long output nobody took (every subscriber full, or none) stops being read, where the runtime
 * can (ExecProcess.pauseOutput): at most one chunk (64 KiB) per pause then goes through cubed, to
 * the sandbox's log, so a command printing faster than ~640 KiB/s with nobody reading blocks on
 * its pipe part of the time; one printing less never notices (its pipe holds 64 KiB meanwhile).
 */
export const UNREAD_PAUSE_MS = 100;
/**
 * Per queued event on top of its bytes: the event, its Buffer and, for a small chunk copied out of
 * the helper's pipe (helper.ts ownBytes), its own ArrayBuffer: ~420 bytes measured for a one-byte
 * event. (It was 64: a queue of one-byte events held ~7 MiB for its "1 MiB".)
 */
const EVENT_OVERHEAD = 512;

interface Subscriber {
  q: AsyncQueue<ProcessEvent>;
  /** Output bytes dropped since the last marker. */
  dropped: number;
}

interface Proc {
  info: ProcessInfo;
  exec: ExecProcess;
  pty: boolean;
  subscribers: Set<Subscriber>;
}

const weigh = (e: ProcessEvent): number => EVENT_OVERHEAD + ('data' in e ? e.data.length : 0);

/** The line a subscriber gets in place of the output it was too slow for (pure). */
export function droppedMarker(bytes: number): Buffer {
  return Buffer.from(`\n[cubed: ${bytes} bytes of output dropped: this reader fell ${SUBSCRIBER_MAX_BYTES / 1024 ** 2} MiB behind]\n`);
}

/** Hands `ev` to `sub` unless it is full (then counts it dropped: false); says what was dropped once there is room again. */
function deliver(sub: Subscriber, ev: ProcessEvent & { data: Buffer }, markerType: 'stderr' | 'pty'): boolean {
  const w = weigh(ev);
  if (sub.dropped > 0 && sub.q.weight > SUBSCRIBER_MAX_BYTES / 2) {
    sub.dropped += ev.data.length; // keeps dropping until half drained, so a marker is not sent per chunk
    return false;
  }
  if (sub.q.weight + w > SUBSCRIBER_MAX_BYTES) {
    sub.dropped += ev.data.length;
    return false;
  }
  flushDropped(sub, markerType);
  sub.q.push(ev);
  return true;
}

function flushDropped(sub: Subscriber, markerType: 'stderr' | 'pty'): void {
  if (sub.dropped === 0) return;
  sub.q.push({ type: markerType, data: droppedMarker(sub.dropped) });
  sub.dropped = 0;
}

function streamDone(s: Readable): Promise<void> {
  if (s.readableEnded || s.destroyed) return Promise.resolve();
  return new Promise((resolve) => {
    s.once('end', resolve);
    s.once('close', resolve);
    s.once('error', () => resolve());
  });
}

// E2B clients expect pids that look like process ids; starting above the init's keeps them apart.
const FIRST_PID = 100;

/** How a process ended, as its log line says it. */
export function endStatus(exit: ExitInfo & { error?: string }): string {
  const how = exit.signal !== undefined ? `signal ${exit.signal}` : `exit code ${exit.exitCode}`;
  return [
    how,
    exit.timedOut ? 'timed out' : '',
    exit.oomKilled ? (exit.signal === 'SIGKILL' ? 'OOM-killed' : 'an OOM kill in the sandbox meanwhile') : '',
    exit.error ?? '',
  ]
    .filter(Boolean)
    .join(', ');
}

export class ProcessTable {
  private nextPid = FIRST_PID;
  private readonly procs = new Map<number, Proc>();
  /** What the processes printed, for the sandbox's logs. */
  readonly output = new OutputLog();

  constructor(
    /** The sandbox's id in messages (a warm sandbox's changes when a create claims it). */
    public sandboxID: string,
    private readonly onExit: (info: ProcessInfo, exit: ExitInfo) => void = () => {},
  ) {}

  start(req: StartProcessRequest, spawn: (req: StartProcessRequest) => ExecProcess): ProcessStream {
    if (req.tag !== undefined && this.byTag(req.tag)) throw new CubeError('CONFLICT', `a process tagged ${req.tag} is already running in ${this.sandboxID}`);
    const exec = spawn(req);
    const pid = this.nextPid++;
    const info: ProcessInfo = {
      pid,
      argv: [...req.argv],
      env: { ...(req.env ?? {}) },
      ...(req.tag !== undefined ? { tag: req.tag } : {}),
      ...(req.cwd !== undefined ? { cwd: req.cwd } : {}),
    };
    const proc: Proc = { info, exec, pty: req.pty !== undefined, subscribers: new Set() };
    this.procs.set(pid, proc);
    const stream = this.subscribe(proc);
    this.output.started(pid, info.argv, new Date());
    const fan = (type: 'stdout' | 'stderr' | 'pty') => (data: Buffer) => {
      this.output.output(pid, type, data, new Date());
      let taken = false;
      for (const sub of proc.subscribers) taken = deliver(sub, { type, data }, proc.pty ? 'pty' : 'stderr') || taken;
      if (!taken) exec.pauseOutput?.(UNREAD_PAUSE_MS);
    };
    exec.stdout.on('data', fan(req.pty ? 'pty' : 'stdout'));
    exec.stderr.on('data', fan('stderr'));
    void Promise.all([
      exec.exited.catch((e: unknown): ExitInfo & { error: string } => ({ exitCode: -1, oomKilled: false, timedOut: false, error: (e as Error).message })),
      streamDone(exec.stdout),
      streamDone(exec.stderr),
    ]).then(([exit]) => {
      this.procs.delete(pid);
      this.output.ended(pid, endStatus(exit), new Date());
      const end: ProcessEvent = { type: 'end', exitCode: exit.exitCode, oomKilled: exit.oomKilled, timedOut: exit.timedOut };
      if (exit.signal !== undefined) end.signal = exit.signal;
      if ('error' in exit) end.error = exit.error;
      for (const sub of proc.subscribers) {
        flushDropped(sub, proc.pty ? 'pty' : 'stderr');
        sub.q.push(end);
        sub.q.end();
      }
      proc.subscribers.clear();
      this.onExit(info, exit);
    });
    return stream;
  }

  connect(sel: { pid?: number; tag?: string }): ProcessStream {
    const proc = sel.pid !== undefined ? this.procs.get(sel.pid) : sel.tag !== undefined ? this.byTag(sel.tag) : undefined;
    if (!proc) throw new CubeError('NOT_FOUND', `process ${sel.pid ?? sel.tag ?? '?'} not found in ${this.sandboxID}`);
    return this.subscribe(proc);
  }

  list(): ProcessInfo[] {
    return [...this.procs.values()].map((p) => p.info);
  }

  sendInput(pid: number, data: Buffer): void {
    const stdin = this.get(pid).exec.stdin;
    if (!stdin || stdin.writableEnded) throw new CubeError('CONFLICT', `process ${pid} has no open stdin`);
    stdin.write(data);
  }

  resize(pid: number, cols: number, rows: number): void {
    const { exec } = this.get(pid);
    if (!exec.resize) throw new CubeError('CONFLICT', `process ${pid} has no terminal to resize (start it with a pty)`);
    exec.resize(cols, rows);
  }

  closeStdin(pid: number): void {
    this.get(pid).exec.stdin?.end();
  }

  signal(pid: number, signal: NodeJS.Signals): void {
    this.get(pid).exec.kill(signal);
  }

  killAll(): void {
    for (const p of this.procs.values()) p.exec.kill('SIGKILL');
  }

  get size(): number {
    return this.procs.size;
  }

  private get(pid: number): Proc {
    const p = this.procs.get(pid);
    if (!p) throw new CubeError('NOT_FOUND', `process ${pid} not found in ${this.sandboxID}`);
    return p;
  }

  private byTag(tag: string): Proc | undefined {
    for (const p of this.procs.values()) if (p.info.tag === tag) return p;
    return undefined;
  }

  private subscribe(proc: Proc): ProcessStream {
    if (proc.subscribers.size >= MAX_SUBSCRIBERS)
      throw new CubeError('RATE_LIMITED', `process ${proc.info.pid} in ${this.sandboxID} has ${MAX_SUBSCRIBERS} connections already; close one first`);
    const sub: Subscriber = { q: new AsyncQueue(() => proc.subscribers.delete(sub), weigh), dropped: 0 };
    sub.q.push({ type: 'start', pid: proc.info.pid });
    proc.subscribers.add(sub);
    return { pid: proc.info.pid, events: sub.q };
  }
}
