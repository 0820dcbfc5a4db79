// A minimal QMP client (QEMU's JSON control socket): greeting, qmp_capabilities, then commands
// answered in order. Events are handed to `onEvent`. One short-lived connection per operation:
// QEMU serves one QMP client at a time, and a connection left open would block the next daemon.
import { connect, type Socket } from 'node:net';
import { CubeError } from '../../errors.js';

/** QMP's answers are short (query-migrate, query-status): a longer line is not QEMU speaking. */
const MAX_LINE = 1024 * 1024;

type Pending = { resolve: (v: unknown) => void; reject: (e: Error) => void };

export class Qmp {
  private buf = '';
  private readonly queue: Pending[] = [];
  private greeted?: () => void;
  onEvent?: (event: string, data: unknown) => void;

  private constructor(private readonly sock: Socket) {
    sock.setEncoding('utf8');
    sock.on('data', (d: string) => {
      this.buf += d;
      let nl: number;
      try {
        while ((nl = this.buf.indexOf('\n')) >= 0) {
          const line = this.buf.slice(0, nl).trim();
          this.buf = this.buf.slice(nl + 1);
          if (line) this.onLine(JSON.parse(line) as Record<string, unknown>);
        }
        if (this.buf.length > MAX_LINE) throw new Error(`a QMP line over ${MAX_LINE} bytes`);
      } catch (e) {
        // QEMU runs the guest: what it says is parsed, never trusted to be well formed. A throw
        // here (bad JSON) was an uncaught exception in the daemon.
        sock.destroy(new CubeError('INTERNAL', `QMP: ${(e as Error).message}`));
      }
    });
    const fail = (e?: Error) => {
      for (const p of this.queue.splice(0)) p.reject(e ?? new Error('QMP connection closed'));
    };
    sock.on('error', fail);
    sock.on('close', () => fail());
  }

  private onLine(msg: Record<string, unknown>): void {
    if ('QMP' in msg) return this.greeted?.();
    if ('event' in msg) return this.onEvent?.(msg.event as string, msg.data);
    const p = this.queue.shift();
    if (!p) return;
    if ('error' in msg) {
      const err = msg.error as { class?: string; desc?: string };
      p.reject(new Error(`${err.class ?? 'QMP error'}: ${err.desc ?? ''}`));
    } else p.resolve(msg.return);
  }

  static async open(path: string, timeoutMs = 5000): Promise<Qmp> {
    const sock = connect(path);
    const q = new Qmp(sock);
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new CubeError('INTERNAL', `QMP ${path}: no greeting within ${timeoutMs} ms`)), timeoutMs);
      q.greeted = () => {
        clearTimeout(timer);
        resolve();
      };
      sock.once('error', (e) => {
        clearTimeout(timer);
        reject(e);
      });
    });
    await q.run('qmp_capabilities');
    return q;
  }

  run<R = unknown>(execute: string, args?: Record<string, unknown>): Promise<R> {
    return new Promise<R>((resolve, reject) => {
      this.queue.push({ resolve: resolve as (v: unknown) => void, reject });
      this.sock.write(JSON.stringify(args ? { execute, arguments: args } : { execute }) + '\n');
    });
  }

  close(): void {
    this.sock.destroy();
  }
}

/** Opens, runs `fn`, closes. */
export async function withQmp<R>(path: string, fn: (q: Qmp) => Promise<R>): Promise<R> {
  const q = await Qmp.open(path);
  try {
    return await fn(q);
  } finally {
    q.close();
  }
}
