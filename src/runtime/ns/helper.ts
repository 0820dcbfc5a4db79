// The client of `cube-launch serve` (native/launch/serve.c): one long-lived helper process per
// daemon that creates sandboxes and runs short host commands (ip, nft) on our behalf. Node's own
// spawn forks the whole daemon and blocks its event loop for the page-table copy (40-50 ms per
// spawn measured under load, every other request waiting meanwhile); the helper's fork is tiny.
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { constants as osConstants } from 'node:os';
import { dirname, join } from 'node:path';
import { Readable } from 'node:stream';
import { fileURLToPath } from 'node:url';
import { CubeError } from '../../errors.js';

export interface HelperResult {
  /** Exit code, or 128 + signal number when the command died of a signal. */
  exitCode: number;
  signal?: NodeJS.Signals;
  stdout: string;
  stderr: string;
}

const OP_CREATE = 0;
const OP_RUN = 1;
const OP_HOLDERS = 2;
const OP_EXEC = 3;
const OP_INPUT = 4;
const OP_CLOSE_STDIN = 5;
const OP_SIGNAL = 6;
const OP_RESIZE = 7;
const OP_DETACH = 8;
const ANSWER_REFUSED = -1;
const ANSWER_DATA = -2;
const ANSWER_CLOSED = -3;
const OP_STORE = 9;
const OP_CREDIT = 10;
const HEADER = 16;
/** The helper parses at most 2047 strings a request (native/launch/serve.c). */
const MAX_EXEC_ARGV = 2000;

/**
 * Output of a streamed job the helper may send ahead of what its reader took, per stream (`-w`,
 * the credit window of native/launch/serve.c): a reader that stops (a paused stream) stops the
 * helper reading that stream's pipe after this much, and the command blocks on the full pipe,
 * while the helper goes on with every other job. Without it a stream nobody read buffered in
 * cubed whatever the command printed (and pausing one would have had to stop the shared pipe).
 */
export const OUTPUT_WINDOW = 256 * 1024;
/** Credit goes back in batches of at least this much (one small frame per batch). */
const CREDIT_BATCH = 64 * 1024;

/**
 * A streamed job's stdout or stderr: the helper's frames pushed as they come; what the reader took
 * goes back to the helper as credit. At most OUTPUT_WINDOW of it is ever in cubed unread.
 */
class JobOutput extends Readable {
  /** Received and not yet credited back. */
  private owed = 0;

  constructor(private readonly credit: (bytes: number) => void) {
    super({ highWaterMark: CREDIT_BATCH });
  }

  arrived(data: Buffer): void {
    this.owed += data.length;
    this.push(data);
  }

  override _read(): void {
    // Below the batch the helper still has most of its window: it sends on, and the next push
    // calls _read again. At or above it, the reader wants more: credit what it took.
    if (this.owed < CREDIT_BATCH) return;
    this.credit(this.owed);
    this.owed = 0;
  }
}

/**
 * `b` as a buffer of its own when it is a small part of a larger one (pure): a view keeps its whole
 * parent, and a reader holding small events of output (a subscriber's queue) would otherwise keep
 * every chunk of the helper's pipe they came in, whatever else those chunks carried. Not pooled
 * (Buffer.from would put it in an 8 KiB slab shared with anything, kept as long as it is).
 */
export function ownBytes(b: Buffer): Buffer {
  if (b.buffer.byteLength <= Math.max(2 * b.length, b.length + 64)) return b;
  const own = Buffer.allocUnsafeSlow(b.length);
  b.copy(own);
  return own;
}

/** A command `cube-launch exec` runs in a child of the helper, its output streamed as it comes. */
export interface HelperExecJob {
  /** Flow-controlled: a paused one stops the command's output at its pipe once OUTPUT_WINDOW is unread. */
  stdout: Readable;
  stderr: Readable;
  /** The exec child's end: the command's exit code, or 128 + signal. Rejects when the helper refused the request or died. */
  exited: Promise<{ exitCode: number; signal?: NodeJS.Signals }>;
  /** Output has ended (or was detached); stdout and stderr are ended then. Never rejects. */
  closed: Promise<void>;
  write(data: Buffer): void;
  closeStdin(): void;
  /** SIGKILL kills the command's whole process group. */
  signal(sig: NodeJS.Signals): void;
  resize(cols: number, rows: number): void;
  /** Stops reading the output (something in the sandbox keeps it open after the command ended). */
  detach(): void;
}

interface StreamJob {
  job: HelperExecJob & { stdout: JobOutput; stderr: JobOutput };
  exit: (r: { exitCode: number; signal?: NodeJS.Signals }) => void;
  fail: (e: unknown) => void;
  close: () => void;
}

/** build/cube-launch of this package (npm run build:native). */
export function defaultLauncher(): string {
  return nativeBinary('cube-launch');
}

/** build/<name> of this package, found from src/ and dist/ alike (npm run build:native). */
export function nativeBinary(name: string): string {
  for (let dir = dirname(fileURLToPath(import.meta.url)), i = 0; i < 6; i++, dir = dirname(dir)) {
    const p = join(dir, 'build', name);
    if (existsSync(p)) return p;
  }
  return join(process.cwd(), 'build', name);
}

/** The answer frame's wait status as exit code and signal (pure). */
export function decodeWaitStatus(status: number): { exitCode: number; signal?: NodeJS.Signals } {
  const sig = status & 0x7f;
  if (sig === 0) return { exitCode: (status >> 8) & 0xff };
  const name = (Object.entries(osConstants.signals) as [NodeJS.Signals, number][]).find(([, n]) => n === sig)?.[0];
  return { exitCode: 128 + sig, ...(name ? { signal: name } : {}) };
}

/** One request frame (pure). */
export function encodeRequest(id: number, op: number, argv: readonly string[], input: Uint8Array): Buffer {
  const args = Buffer.from(argv.map((a) => `${a}\0`).join(''));
  const head = Buffer.alloc(4 + HEADER);
  head.writeUInt32LE(HEADER + args.length + input.length, 0);
  head.writeUInt32LE(id, 4);
  head.writeUInt32LE(op, 8);
  head.writeUInt32LE(argv.length, 12);
  head.writeUInt32LE(input.length, 16);
  return Buffer.concat([head, args, input]);
}

interface Pending {
  resolve: (r: HelperResult) => void;
  reject: (e: unknown) => void;
}

export class LaunchHelper {
  private child?: ChildProcess;
  /** Bytes of the helper's stdout not parsed yet: the chunks as read, the first one partly used. */
  private chunks: Buffer[] = [];
  private buffered = 0;
  private nextId = 1;
  private readonly pending = new Map<number, Pending>();
  private readonly streams = new Map<number, StreamJob>();

  constructor(readonly path: string = defaultLauncher()) {}

  /** A sandbox's init forked by the helper from `create ARGS` (native/launch/create.c); its pid on stdout. */
  create(args: readonly string[]): Promise<HelperResult> {
    return this.request(OP_CREATE, ['create', ...args], Buffer.alloc(0));
  }

  /** Runs argv (PATH lookup) in the host's mount namespace with `input` on stdin. */
  run(argv: readonly string[], input = ''): Promise<HelperResult> {
    if (!argv.length || argv.some((a) => a.includes('\0'))) throw new CubeError('BAD_REQUEST', 'helper run needs a non-empty argv without NUL');
    return this.request(OP_RUN, argv, Buffer.from(input));
  }

  /** Pids (other than the helper's) whose network namespace is the one bound at `netnsPath`; [] when it is gone. */
  async netnsHolders(netnsPath: string): Promise<number[]> {
    const r = await this.request(OP_HOLDERS, [netnsPath], Buffer.alloc(0));
    if (r.exitCode !== 0) {
      if (r.stderr.includes('No such file')) return [];
      throw new CubeError('NETWORK_FAILED', `listing the processes in ${netnsPath}: ${r.stderr.trim()}`);
    }
    return r.stdout.split('\n').filter(Boolean).map(Number);
  }

  /** A btrfs request of the sandbox store (`store ...` in native/launch/store.c), run in the host's mount namespace. */
  store(argv: readonly string[]): Promise<HelperResult> {
    return this.request(OP_STORE, argv, Buffer.alloc(0));
  }

  /**
   * `cube-launch exec ARGS` (its options, `--`, the command) in a forked child of the helper, with
   * `env` as the command's environment; `stdin` keeps a pipe open for write(); `pty` gives the command
   * a terminal of the sandbox (output on stdout, write() types into it).
   */
  exec(args: readonly string[], o: { env: Record<string, string>; stdin: boolean; pty?: { cols: number; rows: number } }): HelperExecJob {
    const argv = Object.entries(o.env).flatMap(([k, v]) => ['-e', `${k}=${v}`]);
    if (o.stdin) argv.push('-i');
    if (o.pty) argv.push('-t', `${o.pty.cols}x${o.pty.rows}`);
    argv.push('-w', String(OUTPUT_WINDOW), 'exec', ...args);
    if (argv.some((a) => a.includes('\0'))) throw new CubeError('BAD_REQUEST', 'exec arguments and environment must not contain NUL');
    if (argv.length > MAX_EXEC_ARGV)
      throw new CubeError('BAD_REQUEST', `exec takes at most ${MAX_EXEC_ARGV} arguments plus twice the environment variables (got ${argv.length})`);
    const child = this.child ?? this.start();
    const id = this.takeId();
    const send = (op: number, a: readonly string[] = [], data: Buffer = Buffer.alloc(0)): void => {
      if (this.streams.has(id) && this.child === child) child.stdin!.write(encodeRequest(id, op, a, data));
    };
    const stdout = new JobOutput((n) => send(OP_CREDIT, ['1', String(n)]));
    const stderr = new JobOutput((n) => send(OP_CREDIT, ['2', String(n)]));
    let exit!: StreamJob['exit'];
    let fail!: StreamJob['fail'];
    let close!: () => void;
    const exited = new Promise<{ exitCode: number; signal?: NodeJS.Signals }>((res, rej) => ((exit = res), (fail = rej)));
    exited.catch(() => {}); // the caller may only await `closed`
    const closed = new Promise<void>((res) => (close = res));
    const job: StreamJob['job'] = {
      stdout,
      stderr,
      exited,
      closed,
      write: (data) => send(OP_INPUT, [], data),
      closeStdin: () => send(OP_CLOSE_STDIN),
      signal: (sig) => send(OP_SIGNAL, [String(osConstants.signals[sig])]),
      resize: (cols, rows) => send(OP_RESIZE, [String(cols), String(rows)]),
      detach: () => send(OP_DETACH),
    };
    this.streams.set(id, { job, exit, fail, close });
    this.refreshRef();
    child.stdin!.write(encodeRequest(id, OP_EXEC, argv, Buffer.alloc(0)));
    return job;
  }

  private takeId(): number {
    const id = this.nextId;
    this.nextId = (this.nextId % 0xffff_fffe) + 1;
    return id;
  }

  private request(op: number, argv: readonly string[], input: Buffer): Promise<HelperResult> {
    const child = this.child ?? this.start();
    const id = this.takeId();
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      this.refreshRef();
      child.stdin!.write(encodeRequest(id, op, argv, input));
    });
  }

  /** One frame for a streamed exec job. */
  private onStreamFrame(id: number, s: StreamJob, status: number, out: Buffer, err: Buffer): void {
    if (status === ANSWER_DATA) {
      if (out.length) s.job.stdout.arrived(ownBytes(out));
      if (err.length) s.job.stderr.arrived(ownBytes(err));
    } else if (status === ANSWER_CLOSED || status === ANSWER_REFUSED) {
      if (status === ANSWER_REFUSED) s.fail(new CubeError('EXEC_FAILED', `launch helper refused an exec: ${err.toString()}`));
      this.endStream(id, s);
    } else {
      s.exit(decodeWaitStatus(status));
    }
  }

  private endStream(id: number, s: StreamJob): void {
    this.streams.delete(id);
    s.job.stdout.push(null);
    s.job.stderr.push(null);
    s.close();
    this.refreshRef();
  }

  private start(): ChildProcess {
    const child = spawn(this.path, ['serve'], { env: { PATH: process.env.PATH ?? '/usr/sbin:/usr/bin:/sbin:/bin' }, stdio: ['pipe', 'pipe', 'pipe'] });
    let stderr = '';
    child.stderr!.on('data', (b: Buffer) => (stderr = (stderr + b.toString()).slice(-2000)));
    child.stdout!.on('data', (b: Buffer) => this.onData(b));
    child.stdin!.on('error', () => {}); // the exit handler reports it
    const gone = (why: string) => {
      if (this.child !== child) return;
      this.child = undefined;
      this.chunks = [];
      this.buffered = 0;
      const err = new CubeError('INTERNAL', `launch helper ${this.path} ${why}${stderr ? `: ${stderr.trim()}` : ''}`);
      for (const p of this.pending.values()) p.reject(err);
      this.pending.clear();
      for (const [id, s] of this.streams) {
        s.fail(err);
        this.endStream(id, s);
      }
    };
    child.once('error', (e) => gone(`failed: ${e.message}`));
    child.once('exit', (code, signal) => gone(`exited (${signal ?? code})`));
    child.unref();
    this.child = child;
    this.ref(false);
    return child;
  }

  /** Keeps the process alive only while answers are due, so an idle helper never holds it. */
  private refreshRef(): void {
    this.ref(this.pending.size + this.streams.size > 0);
  }

  private ref(on: boolean): void {
    const c = this.child;
    if (!c) return;
    for (const s of [c.stdout, c.stderr, c.stdin] as unknown as ({ ref(): void; unref(): void } | null)[]) {
      if (s) on ? s.ref() : s.unref();
    }
  }

  /**
   * Frames out of the helper's stdout. A frame inside one chunk is a view of it; one across chunks
   * is copied together once. (Before, each chunk was concatenated onto what was left, a new
   * buffer per chunk and, for a frame of many chunks, all of it again each time.)
   */
  private onData(chunk: Buffer): void {
    this.chunks.push(chunk);
    this.buffered += chunk.length;
    while (this.buffered >= 4) {
      const len = this.peekLength();
      if (this.buffered < 4 + len) return;
      const frame = this.take(4 + len);
      const id = frame.readUInt32LE(4);
      const status = frame.readInt32LE(8);
      const olen = frame.readUInt32LE(12);
      const s = this.streams.get(id);
      if (s) {
        this.onStreamFrame(id, s, status, frame.subarray(16, 16 + olen), frame.subarray(16 + olen, 4 + len));
        continue;
      }
      const stdout = frame.toString('utf8', 16, 16 + olen);
      const stderr = frame.toString('utf8', 16 + olen, 4 + len);
      const p = this.pending.get(id);
      if (!p) continue;
      this.pending.delete(id);
      this.refreshRef();
      if (status === -1) p.reject(new CubeError('INTERNAL', `launch helper refused a request: ${stderr}`));
      else p.resolve({ ...decodeWaitStatus(status), stdout, stderr });
    }
  }

  /** The length word of the next frame (it may straddle chunks). */
  private peekLength(): number {
    const first = this.chunks[0]!;
    if (first.length >= 4) return first.readUInt32LE(0);
    const word = Buffer.alloc(4);
    let off = 0;
    for (let i = 0; off < 4; i++) off += this.chunks[i]!.copy(word, off, 0, Math.min(this.chunks[i]!.length, 4 - off));
    return word.readUInt32LE(0);
  }

  /** The next n (<= buffered) bytes: a view of the first chunk when it holds them, else one copy. */
  private take(n: number): Buffer {
    this.buffered -= n;
    const first = this.chunks[0]!;
    if (first.length >= n) {
      if (first.length === n) this.chunks.shift();
      else this.chunks[0] = first.subarray(n);
      return first.subarray(0, n);
    }
    const out = Buffer.allocUnsafeSlow(n);
    for (let off = 0; off < n;) {
      const c = this.chunks[0]!;
      const k = c.copy(out, off, 0, Math.min(c.length, n - off));
      off += k;
      if (k === c.length) this.chunks.shift();
      else this.chunks[0] = c.subarray(k);
    }
    return out;
  }
}

let shared: LaunchHelper | undefined;

/** The process-wide helper (lazily started on first use). */
export function sharedHelper(): LaunchHelper {
  return (shared ??= new LaunchHelper());
}
