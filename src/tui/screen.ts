// Our own line-diffing screen writer. Ink 6.8's incrementalRendering moves the cursor up
// one line short when the frame ends with a newline (every non-fullscreen frame), so each
// update lands one row low: seen in tmux as duplicated header lines. Instead Ink renders
// whole frames (debug mode) into this sink, and only the lines that changed are written,
// each at its absolute row on the alternate screen: no relative cursor arithmetic to drift.
import { EventEmitter } from 'node:events';

const ESC = '\x1b[';
/** DEC 2026 synchronized output: the terminal shows the update at once (ignored where unsupported). */
const BEGIN_SYNC = `${ESC}?2026h`;
const END_SYNC = `${ESC}?2026l`;

/**
 * The bytes that turn the screen showing `prev` into `next` (rows are 1-based). Each changed
 * row is erased before it is written, not after: with autowrap off, a line as wide as the
 * terminal leaves the cursor ON its last column, and an erase-to-end written after it took
 * that character (tmux at 80 columns showed `POO` and `1-18 of 3`).
 */
export function diffFrame(prev: readonly string[], next: readonly string[]): string {
  let out = '';
  for (let i = 0; i < next.length; i++) {
    if (next[i] !== prev[i]) out += `${ESC}${i + 1};1H${ESC}2K${next[i]}`;
  }
  for (let i = next.length; i < prev.length; i++) out += `${ESC}${i + 1};1H${ESC}2K`;
  return out;
}

/** What the console writes to take the terminal: alternate screen, no autowrap, cursor hidden, mouse reporting off (SREs select text with the mouse). */
export const TERMINAL_ENTER = '\x1b[?1049h\x1b[?7l\x1b[?25l\x1b[?1000l\x1b[?1002l\x1b[?1003l\x1b[?1006l\x1b[H\x1b[2J';
/** What gives it back: autowrap and cursor on, the main screen as it was. */
export const TERMINAL_LEAVE = '\x1b[?7h\x1b[?25h\x1b[?1049l';

/** A stdout stand-in for Ink: sizes and resize events of the real terminal, frames diffed onto it. */
export class ScreenSink extends EventEmitter {
  private prev: string[] = [];
  private closed = false;
  /** Suspended (a shell has the terminal): frames are kept, not written. */
  private held = false;
  readonly isTTY = true;
  /** Bytes written to the terminal so far (the render benchmark reads it). */
  bytesWritten = 0;

  constructor(private readonly out: { write(s: string): unknown; columns?: number; rows?: number; on?(e: 'resize', f: () => void): unknown }) {
    super();
    out.on?.('resize', () => {
      // Wrapped or moved lines cannot be trusted after a resize: repaint everything.
      this.prev = [];
      if (!this.held) this.emit_(`${ESC}2J`);
      this.emit('resize');
    });
  }

  get columns(): number {
    return this.out.columns ?? 80;
  }

  get rows(): number {
    return this.out.rows ?? 24;
  }

  /** After this nothing reaches the terminal (Ink's last frame on unmount would land on the main screen). */
  close(): void {
    this.closed = true;
  }

  /** Nothing reaches the terminal until resume(); Ink's frames meanwhile are kept (the last one is drawn then). */
  suspend(): void {
    this.held = true;
  }

  /** The terminal is the console's again (cleared by TERMINAL_ENTER): the last frame is drawn whole. */
  resume(): void {
    this.held = false;
    const last = this.prev;
    this.prev = [];
    this.write(last.join('\n'));
  }

  write(frame: string): boolean {
    if (this.closed) return true;
    const next = frame.replace(/\n$/, '').split('\n');
    if (this.held) {
      this.prev = next;
      return true;
    }
    const diff = diffFrame(this.prev, next);
    this.prev = next;
    if (diff) this.emit_(BEGIN_SYNC + diff + END_SYNC);
    return true;
  }

  private emit_(s: string): void {
    this.bytesWritten += Buffer.byteLength(s);
    this.out.write(s);
  }
}
