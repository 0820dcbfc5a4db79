// What a sandbox's processes printed, for its logs (E2B `sandbox logs`): a bounded ring of lines,
// oldest dropped first, with each process's start and end. Output is cut into lines per process
// and stream; a line still open is kept apart until its newline or the process's end. Pure (the
// clock is passed in).
//
// Lines are cut on the bytes and only what is kept is decoded: at most maxChars characters a line,
// and of a chunk only its last maxLines lines (the others would leave the ring within the same
// call). Decoding every chunk whole and slicing the lines out of it, as before, made a string of
// each chunk (up to 64 KiB) that each kept line, a V8 sliced string, pinned whole: with `cat
// /dev/zero` (no newlines: each chunk one cut line) the ring of 1000 lines held ~64 MiB of parents,
// and the strings of every chunk went through the old generation at the rate the output came (see
// process-table.ts for the figures). An open line is a copy of its bytes (at most 4 x maxChars),
// never a view pinning the chunk it came in.

export interface OutputLine {
  /** ISO 8601. */
  at: string;
  pid: number;
  stream: 'stdout' | 'stderr' | 'pty' | 'process';
  line: string;
}

/** Lines kept per sandbox: enough for a rollout's commands, bounded whatever a process prints. */
export const MAX_LINES = 1000;
/** A longer line is cut here, in characters (a progress bar without newlines is one line). */
export const MAX_LINE_CHARS = 2000;

const NL = 0x0a;
const CR = 0x0d;

/**
 * Where the first `max` characters of the UTF-8 in `b` end (a byte offset), and whether there were
 * that many (pure). A character is counted at its lead byte: an invalid sequence may decode to
 * more replacement characters than counted here, never to an unbounded string (it is at most the
 * bytes up to the end, scanned no further than 4 x max).
 */
export function utf8Prefix(b: Uint8Array, max: number): { end: number; full: boolean } {
  let chars = 0;
  for (let i = 0; i < b.length; i++) {
    if ((b[i]! & 0xc0) === 0x80) continue; // a continuation byte
    if (chars === max) return { end: i, full: true };
    chars++;
  }
  return { end: b.length, full: chars === max };
}

export class OutputLog {
  /** A ring: `ring[(head + i) % maxLines]` is the i-th oldest of `count` lines. */
  private readonly ring: OutputLine[] = [];
  private head = 0;
  private count = 0;
  /** Unfinished line per `pid/stream`: its first bytes (a copy), never more than a cut line needs. */
  private readonly open = new Map<string, Buffer>();

  constructor(
    private readonly maxLines = MAX_LINES,
    private readonly maxChars = MAX_LINE_CHARS,
  ) {}

  started(pid: number, argv: readonly string[], at: Date): void {
    this.add({ at: at.toISOString(), pid, stream: 'process', line: `started: ${argv.join(' ')}` });
  }

  output(pid: number, stream: 'stdout' | 'stderr' | 'pty', data: Buffer, at: Date): void {
    const key = `${pid}/${stream}`;
    const iso = at.toISOString();
    // Complete lines end at each newline: [start, nl) of data, the first one after the open bytes.
    const ends: number[] = [];
    for (let i = data.indexOf(NL); i >= 0; i = data.indexOf(NL, i + 1)) ends.push(i);
    const held = this.open.get(key);
    if (ends.length > 0) {
      this.open.delete(key);
      // Only the last maxLines complete lines can still be in the ring when this call returns.
      const first = Math.max(0, ends.length - this.maxLines);
      for (let k = first; k < ends.length; k++) {
        const start = k === 0 ? 0 : ends[k - 1]! + 1;
        let end = ends[k]!;
        if (end > start && data[end - 1] === CR) end--;
        const bytes = k === 0 && held ? Buffer.concat([held, this.bounded(data.subarray(start, end))]) : data.subarray(start, end);
        // A lone CR ending the held bytes (CR LF split between chunks).
        const line = k === 0 && held && end === start && bytes.at(-1) === CR ? bytes.subarray(0, -1) : bytes;
        this.add({ at: iso, pid, stream, line: this.decode(line) });
      }
    }
    const tail = data.subarray(ends.length > 0 ? ends.at(-1)! + 1 : 0);
    if (tail.length === 0) return;
    const rest = ends.length === 0 && held ? Buffer.concat([held, this.bounded(tail)]) : this.bounded(tail);
    // A line of maxChars characters without its newline yet is logged now, cut; what follows it in
    // this chunk is not kept (as a longer line is cut), the next chunk starts a new line.
    if (utf8Prefix(rest, this.maxChars).full) {
      this.open.delete(key);
      this.add({ at: iso, pid, stream, line: this.decode(rest) });
    } else this.open.set(key, Buffer.from(rest)); // a copy: the chunk is not kept for it
  }

  ended(pid: number, status: string, at: Date): void {
    for (const [key, bytes] of this.open) {
      const [p, stream] = key.split('/') as [string, OutputLine['stream']];
      if (Number(p) !== pid) continue;
      this.add({ at: at.toISOString(), pid, stream, line: this.decode(bytes) });
      this.open.delete(key);
    }
    this.add({ at: at.toISOString(), pid, stream: 'process', line: `ended: ${status}` });
  }

  lines(): OutputLine[] {
    const out: OutputLine[] = [];
    for (let i = 0; i < this.count; i++) out.push(this.ring[(this.head + i) % this.maxLines]!);
    return out;
  }

  /** The bytes of `b` a cut line can use: 4 bytes a character at most. */
  private bounded(b: Buffer): Buffer {
    return b.length > 4 * this.maxChars ? b.subarray(0, 4 * this.maxChars) : b;
  }

  /** The line's first maxChars characters as a string of their own (no parent pinned). */
  private decode(b: Buffer): string {
    return b.toString('utf8', 0, utf8Prefix(b, this.maxChars).end);
  }

  private add(l: OutputLine): void {
    if (l.line.length > this.maxChars) l = { ...l, line: l.line.slice(0, this.maxChars) }; // `started:` with a long argv
    if (this.count < this.maxLines) {
      this.ring[(this.head + this.count) % this.maxLines] = l;
      this.count++;
    } else {
      this.ring[this.head] = l;
      this.head = (this.head + 1) % this.maxLines;
    }
  }
}
