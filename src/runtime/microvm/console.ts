// A microVM's serial console on the host: QEMU serves it on a socket (c.sock) and the daemon keeps
// its tail in <dir>/console.log, rotated to console.log.1 at `maxBytes`, so a guest writing to its
// console holds at most twice that on the host (QEMU's own `-serial file:` grew without bound:
// +20 MiB in 147 s). QEMU's stderr goes to the same log. While no daemon reads (it restarts), QEMU
// drops what the guest writes.
import { closeSync, openSync, readSync, renameSync, statSync, writeSync } from 'node:fs';
import { connect, type Socket } from 'node:net';
import { join } from 'node:path';

export const CONSOLE_LOG = 'console.log';
export const CONSOLE_SOCKET = 'c.sock';

export class ConsoleLog {
  private fd: number;
  private size: number;
  private sock?: Socket;

  constructor(
    private readonly dir: string,
    private readonly maxBytes: number,
  ) {
    this.fd = openSync(join(dir, CONSOLE_LOG), 'a');
    this.size = statSync(join(dir, CONSOLE_LOG)).size;
  }

  /**
   * Appends (writes are small: a socket chunk, at most 64 KiB, into the page cache); past the
   * bound the current file becomes console.log.1 and a new one starts.
   */
  write(chunk: Buffer): void {
    if (this.fd < 0) return;
    if (this.size > 0 && this.size + chunk.length > this.maxBytes) {
      closeSync(this.fd);
      renameSync(join(this.dir, CONSOLE_LOG), join(this.dir, `${CONSOLE_LOG}.1`));
      this.fd = openSync(join(this.dir, CONSOLE_LOG), 'a');
      this.size = 0;
    }
    // A chunk larger than the bound keeps its tail.
    const part = chunk.length > this.maxBytes ? chunk.subarray(chunk.length - this.maxBytes) : chunk;
    writeSync(this.fd, part);
    this.size += part.length;
  }

  /** Reads QEMU's console socket (made anew for each QEMU: attach again after a restart or a resume). */
  attach(): void {
    this.sock?.destroy();
    const s = connect(join(this.dir, CONSOLE_SOCKET));
    s.on('data', (d: Buffer) => this.write(d));
    s.on('error', () => undefined); // QEMU gone: the log keeps what it had
    this.sock = s;
  }

  close(): void {
    this.sock?.destroy();
    this.sock = undefined;
    if (this.fd >= 0) closeSync(this.fd);
    this.fd = -1;
  }
}

/** The last `lines` lines of a VM's console (the current file, and the rotated one when that is short), read from the end. */
export function consoleTail(dir: string, lines: number, maxRead = 64 * 1024): string {
  const tail = (name: string): string => {
    let fd: number;
    try {
      fd = openSync(join(dir, name), 'r');
    } catch {
      return '';
    }
    try {
      const size = statSync(join(dir, name)).size;
      const n = Math.min(size, maxRead);
      const buf = Buffer.alloc(n);
      readSync(fd, buf, 0, n, size - n);
      return buf.toString('utf8');
    } finally {
      closeSync(fd);
    }
  };
  let text = tail(CONSOLE_LOG).trim();
  if (text.split('\n').length < lines) text = `${tail(`${CONSOLE_LOG}.1`)}\n${text}`.trim();
  return text ? text.split('\n').slice(-lines).join(' | ') : '(empty)';
}
