// The processes started in one sandbox: E2B-style pids (unique in the sandbox, never reused),
// tags, output fanned out to every subscriber (so connectProcess can attach later, without
// replay), stdin and signals. A subscriber leaving never stops the process.
import type { Readable } from 'node:stream';
import type { ExecProcess, ExitInfo } from '../runtime/types.js';
import type { ProcessEvent, ProcessInfo, ProcessStream, StartProcessRequest } from './types.js';
import { CubeError } from '../errors.js';
import { AsyncQueue } from './async-queue.js';
import { OutputLog } from './output-log.js';

interface Proc {
  info: ProcessInfo;
  exec: ExecProcess;
  subscribers: Set<AsyncQueue<ProcessEvent>>;
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
  return [how, exit.timedOut ? 'timed out' : '', exit.oomKilled ? 'OOM-killed' : '', exit.error ?? ''].filter(Boolean).join(', ');
}

export class ProcessTable {
  private nextPid = FIRST_PID;
  private readonly procs = new Map<number, Proc>();
  /** What the processes printed, for the sandbox's logs. */
  readonly output = new OutputLog();

  constructor(
    private readonly sandboxID: string,
    private readonly onExit: (info: ProcessInfo, exit: ExitInfo) => void = () => {},
  ) {}

  start(req: StartProcessRequest, spawn: (req: StartProcessRequest) => ExecProcess): ProcessStream {
    if (req.tag !== undefined && this.byTag(req.tag)) throw new CubeError('CONFLICT', `a process tagged ${req.tag} is already running in ${this.sandboxID}`);
    const exec = spawn(req);
    const pid = this.nextPid++;
    const info: ProcessInfo = { pid, argv: [...req.argv], env: { ...(req.env ?? {}) }, ...(req.tag !== undefined ? { tag: req.tag } : {}), ...(req.cwd !== undefined ? { cwd: req.cwd } : {}) };
    const proc: Proc = { info, exec, subscribers: new Set() };
    this.procs.set(pid, proc);
    const stream = this.subscribe(proc);
    this.output.started(pid, info.argv, new Date());
    const fan = (type: 'stdout' | 'stderr' | 'pty') => (data: Buffer) => {
      this.output.output(pid, type, data, new Date());
      for (const q of proc.subscribers) q.push({ type, data });
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
      for (const q of proc.subscribers) {
        q.push(end);
        q.end();
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
    const q: AsyncQueue<ProcessEvent> = new AsyncQueue(() => proc.subscribers.delete(q));
    q.push({ type: 'start', pid: proc.info.pid });
    proc.subscribers.add(q);
    return { pid: proc.info.pid, events: q };
  }
}
