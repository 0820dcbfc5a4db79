// The host end of cube-agent's protocol (native/cube-agent.c): frames of
// `u32le length | u8 type | u32le channel | payload` over the VM's virtio-serial unix socket.
// One connection per VM multiplexes every exec and file operation by channel.
import { connect, type Socket } from 'node:net';
import { PassThrough, Writable, type Readable } from 'node:stream';
import { CubeError, type ErrorKind } from '../../errors.js';
import type { FileStat } from '../types.js';

export const T = {
  EXEC: 1,
  STDIN: 2,
  STDIN_EOF: 3,
  SIGNAL: 4,
  RESIZE: 5,
  STAT: 10,
  LIST: 11,
  READ: 12,
  WRITE_OPEN: 13,
  WRITE_DATA: 14,
  WRITE_END: 15,
  MKDIR: 16,
  RENAME: 17,
  REMOVE: 18,
  SETUP: 20,
  PING: 21,
  MOUNT: 22,
  STDOUT: 64,
  STDERR: 65,
  EXIT: 66,
  STARTED: 67,
  ERROR: 70,
  OK: 71,
  DATA: 72,
  END: 73,
  PONG: 80,
} as const;

const HEADER = 9;
/** The agent's frame limit (MAX_FRAME in cube-agent.c); file data goes in chunks below it. */
export const CHUNK = 64 * 1024;

export function encodeFrame(type: number, chan: number, payload: Buffer | string = Buffer.alloc(0)): Buffer {
  const p = typeof payload === 'string' ? Buffer.from(payload) : payload;
  const h = Buffer.alloc(HEADER);
  h.writeUInt32LE(p.length, 0);
  h[4] = type;
  h.writeUInt32LE(chan, 5);
  return Buffer.concat([h, p]);
}

/** NUL-terminated fields (the agent's string payloads). */
export function fields(...parts: (string | number)[]): Buffer {
  for (const p of parts) if (String(p).includes('\0')) throw new CubeError('BAD_REQUEST', 'NUL byte in a path, argument or variable');
  return Buffer.from(parts.map((p) => `${p}\0`).join(''));
}

/**
 * The last field of a file request the agent runs as `uid`:`gid` (its fsuid and fsgid), so the
 * guest kernel decides as for that user's own process (native/cube-agent.c take_identity).
 */
export function asField(uid: number, gid: number): string {
  return `as=${uid}:${gid}`;
}

/** Whether the agent runs file requests as their user (asField); an agent before it echoes the question and would act as root. */
export async function agentActsAsUser(conn: AgentConnection): Promise<boolean> {
  return splitFields(await conn.request(T.PING, fields('caps'))).includes('ids');
}

export function splitFields(b: Buffer): string[] {
  const s = b.toString('utf8');
  const out = s.split('\0');
  if (out[out.length - 1] === '') out.pop();
  return out;
}

export interface Frame {
  type: number;
  chan: number;
  payload: Buffer;
}

/**
 * The largest frame a guest may send (a directory listing is the largest reply: the agent refuses
 * one past its MAX_REPLY, which is this). A header claiming more breaks the protocol: buffering
 * it would let a guest's root hold the daemon's memory (a header claiming 4 GiB took 230 MiB
 * and stalled /health for a minute before this limit).
 */
export const MAX_GUEST_FRAME = 16 * 1024 * 1024;

/** The agent broke the protocol: its sandbox is killed with this reason (deathReason 'agent-protocol: ...'). */
export class AgentProtocolError extends Error {
  readonly reason = 'agent-protocol';
}

/**
 * Incremental frame decoder (pure): chunks are kept as they came and each byte is copied at most
 * once, into the frame it belongs to. Re-concatenating the whole backlog on every chunk was
 * quadratic: a 16 MiB frame in 64 KiB chunks copied 2 GiB. Throws AgentProtocolError on a header
 * over `maxPayload`, as soon as the header is in.
 */
export class FrameDecoder {
  private chunks: Buffer[] = [];
  private have = 0;
  private header?: { len: number; type: number; chan: number };

  constructor(private readonly maxPayload = MAX_GUEST_FRAME) {}

  /** Bytes held for frames not complete yet. */
  get buffered(): number {
    return this.have;
  }

  push(chunk: Buffer): Frame[] {
    if (chunk.length) {
      this.chunks.push(chunk);
      this.have += chunk.length;
    }
    const out: Frame[] = [];
    for (;;) {
      if (!this.header) {
        if (this.have < HEADER) break;
        const h = this.take(HEADER);
        const len = h.readUInt32LE(0);
        if (len > this.maxPayload) throw new AgentProtocolError(`a frame of ${len} bytes announced (the limit is ${this.maxPayload})`);
        this.header = { len, type: h[4]!, chan: h.readUInt32LE(5) };
      }
      if (this.have < this.header.len) break;
      out.push({ type: this.header.type, chan: this.header.chan, payload: this.take(this.header.len) });
      this.header = undefined;
    }
    return out;
  }

  /** The first n held bytes (n <= have): a view of the first chunk when it holds them, else one copy. */
  private take(n: number): Buffer {
    this.have -= n;
    const first = this.chunks[0];
    if (first && first.length >= n) {
      if (first.length === n) this.chunks.shift();
      else this.chunks[0] = first.subarray(n);
      return first.subarray(0, n);
    }
    const out = Buffer.allocUnsafe(n);
    let at = 0;
    while (at < n) {
      const c = this.chunks[0]!;
      const k = Math.min(c.length, n - at);
      c.copy(out, at, 0, k);
      at += k;
      if (k === c.length) this.chunks.shift();
      else this.chunks[0] = c.subarray(k);
    }
    return out;
  }
}

/** Stat records: type, size, mode, uid, gid, mtime ms, path, symlink target (pure). */
export function parseStats(payload: Buffer): FileStat[] {
  const f = splitFields(payload);
  const out: FileStat[] = [];
  for (let i = 0; i + 8 <= f.length; i += 8) {
    const [t, size, mode, uid, gid, mtime, path, target] = f.slice(i, i + 8) as [string, string, string, string, string, string, string, string];
    out.push({
      name: path === '/' ? '/' : path.slice(path.lastIndexOf('/') + 1),
      path,
      type: t === 'f' ? 'file' : t === 'd' ? 'dir' : t === 'l' ? 'symlink' : 'other',
      size: Number(size),
      mode: Number(mode),
      uid: Number(uid),
      gid: Number(gid),
      mtime: new Date(Number(mtime)),
      ...(t === 'l' ? { symlinkTarget: target } : {}),
    });
  }
  return out;
}

/** errno numbers the agent reports, mapped as the ns driver maps the same errors (ns/files.ts fsError). */
function errnoKind(errno: number): ErrorKind {
  switch (errno) {
    case 2: // ENOENT
      return 'NOT_FOUND';
    case 16: // EBUSY
      return 'CONFLICT';
    case 1: // EPERM (a sticky directory, for a user)
    case 13: // EACCES (a user's permissions)
    case 18: // EXDEV
    case 27: // EFBIG
    case 31: // EMLINK
    case 40: // ELOOP
    case 17: // EEXIST
    case 39: // ENOTEMPTY
      return 'CONFLICT';
    case 20: // ENOTDIR
    case 21: // EISDIR
    case 22: // EINVAL
    case 28: // ENOSPC
    case 30: // EROFS
    case 7: // E2BIG (a listing over the frame limit)
    case 36: // ENAMETOOLONG
    case 122: // EDQUOT
      return 'BAD_REQUEST';
    default:
      return 'INTERNAL';
  }
}

export function agentError(payload: Buffer, fallback: ErrorKind = 'INTERNAL'): CubeError {
  const [errno, message] = splitFields(payload);
  const n = Number(errno);
  const kind = Number.isInteger(n) && n > 0 ? errnoKind(n) : fallback;
  return new CubeError(kind === 'INTERNAL' ? fallback : kind, message ?? 'guest agent error');
}

type Handler = (f: Frame) => void;

/**
 * One connection to a VM's agent. Requests get a fresh channel; the handler of a channel sees
 * every frame the agent sends on it until it unregisters. A closed connection fails them all.
 */
export class AgentConnection {
  private readonly handlers = new Map<number, { on: Handler; fail: (e: Error) => void }>();
  private nextChan = 1;
  private closedWith?: Error;

  private constructor(
    private readonly sock: Socket,
    onBroken?: (e: AgentProtocolError) => void,
  ) {
    const dec = new FrameDecoder();
    sock.on('data', (chunk: Buffer) => {
      let frames: Frame[];
      try {
        frames = dec.push(chunk);
      } catch (e) {
        // Nothing more is read from a guest that broke the protocol: its frames cannot be trusted to line up again.
        sock.destroy(e as Error);
        if (e instanceof AgentProtocolError) onBroken?.(e);
        return;
      }
      for (const f of frames) this.handlers.get(f.chan)?.on(f);
    });
    const close = (e?: Error) => {
      if (this.closedWith) return;
      this.closedWith = e ?? new Error('agent connection closed');
      for (const h of [...this.handlers.values()]) h.fail(this.closedWith);
      this.handlers.clear();
    };
    sock.on('error', close);
    sock.on('close', () => close());
  }

  /** `onBroken`: the agent broke the protocol (the connection is closed by then). */
  static open(path: string, onBroken?: (e: AgentProtocolError) => void): Promise<AgentConnection> {
    return new Promise((resolve, reject) => {
      const s = connect(path);
      s.once('connect', () => {
        s.removeListener('error', reject);
        resolve(new AgentConnection(s, onBroken));
      });
      s.once('error', reject);
    });
  }

  get closed(): boolean {
    return this.closedWith !== undefined;
  }

  close(): void {
    this.sock.destroy();
  }

  send(type: number, chan: number, payload?: Buffer | string): void {
    if (this.closedWith) throw new CubeError('EXEC_FAILED', `agent connection closed: ${this.closedWith.message}`);
    this.sock.write(encodeFrame(type, chan, payload));
  }

  /** Registers a channel; the returned function unregisters it. */
  channel(on: Handler, fail: (e: Error) => void): { chan: number; done: () => void } {
    if (this.closedWith) throw new CubeError('EXEC_FAILED', `agent connection closed: ${this.closedWith.message}`);
    const chan = this.nextChan++;
    if (this.nextChan > 0xfffffff0) this.nextChan = 1;
    this.handlers.set(chan, { on, fail });
    return { chan, done: () => this.handlers.delete(chan) };
  }

  /** One request, one reply (OK or ERROR) frame. */
  request(type: number, payload: Buffer, timeoutMs = 30_000): Promise<Buffer> {
    return new Promise((resolve, reject) => {
      let timer: NodeJS.Timeout | undefined;
      const { chan, done } = this.channel(
        (f) => {
          if (f.type !== T.OK && f.type !== T.ERROR && f.type !== T.PONG) return;
          clearTimeout(timer);
          done();
          if (f.type === T.ERROR) reject(agentError(f.payload));
          else resolve(Buffer.from(f.payload));
        },
        (e) => {
          clearTimeout(timer);
          reject(new CubeError('INTERNAL', `guest agent: ${e.message}`));
        },
      );
      timer = setTimeout(() => {
        done();
        reject(new CubeError('INTERNAL', `guest agent did not answer within ${timeoutMs} ms`));
      }, timeoutMs);
      this.send(type, chan, payload);
    });
  }

  /** A file's contents as a stream (DATA frames until END); `as`: the identity field of a user's request (asField). */
  read(path: string, as?: string): Promise<Readable> {
    return new Promise((resolve, reject) => {
      const out = new PassThrough();
      let started = false;
      const { chan, done } = this.channel(
        (f) => {
          if (f.type === T.ERROR) {
            done();
            const e = agentError(f.payload);
            if (started) out.destroy(e);
            else reject(e);
            return;
          }
          if (!started) {
            started = true;
            resolve(out);
          }
          if (f.type === T.DATA) out.write(Buffer.from(f.payload));
          else if (f.type === T.END) {
            done();
            out.end();
          }
        },
        (e) => (started ? out.destroy(e) : reject(e)),
      );
      this.send(T.READ, chan, fields(path, ...(as ? [as] : [])));
    });
  }

  /** Streams `data` into a file; resolves with the agent's stat of it. `as`: see read(). */
  async write(path: string, uid: number, gid: number, data: Readable | Buffer, as?: string): Promise<FileStat> {
    let result!: Promise<Buffer>;
    const ch = await new Promise<number>((resolveChan) => {
      result = new Promise<Buffer>((resolve, reject) => {
        const { chan, done } = this.channel((f) => {
          if (f.type !== T.OK && f.type !== T.ERROR) return;
          done();
          if (f.type === T.ERROR) reject(agentError(f.payload));
          else resolve(Buffer.from(f.payload));
        }, reject);
        resolveChan(chan);
      });
    });
    result.catch(() => undefined); // awaited below
    this.send(T.WRITE_OPEN, ch, fields(path, uid, gid, ...(as ? [as] : [])));
    const sink = new Writable({
      write: (chunk: Buffer, _enc, cb) => {
        try {
          for (let o = 0; o < chunk.length; o += CHUNK) this.send(T.WRITE_DATA, ch, chunk.subarray(o, o + CHUNK));
          if (this.sock.writableNeedDrain) this.sock.once('drain', () => cb());
          else cb();
        } catch (e) {
          cb(e as Error);
        }
      },
    });
    if (Buffer.isBuffer(data)) await new Promise<void>((res, rej) => sink.end(data, () => res()).once('error', rej));
    else
      await new Promise<void>((res, rej) => {
        data.once('error', rej);
        data.pipe(sink).once('finish', res).once('error', rej);
      });
    this.send(T.WRITE_END, ch);
    const stat = parseStats(await result)[0];
    if (!stat) throw new CubeError('INTERNAL', `guest agent returned no stat for ${path}`);
    return stat;
  }
}

export function rejectAfter(ms: number, message: string, kind: ErrorKind = 'CREATE_FAILED'): { promise: Promise<never>; cancel: () => void } {
  let timer: NodeJS.Timeout;
  const promise = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new CubeError(kind, message)), ms);
  });
  promise.catch(() => undefined); // raced by the caller, who gets the rejection; not unhandled when cancelled
  return { promise, cancel: () => clearTimeout(timer) };
}
