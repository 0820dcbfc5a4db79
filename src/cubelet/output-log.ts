// What a sandbox's processes printed, for its logs (E2B `sandbox logs`): a bounded ring of lines,
// oldest dropped first, with each process's start and end. Output is cut into lines per process
// and stream; a line still open is kept apart until its newline or the process's end. Pure (the
// clock is passed in).

export interface OutputLine {
  /** ISO 8601. */
  at: string;
  pid: number;
  stream: 'stdout' | 'stderr' | 'pty' | 'process';
  line: string;
}

/** Lines kept per sandbox: enough for a rollout's commands, bounded whatever a process prints. */
export const MAX_LINES = 1000;
/** A longer line is cut here (a progress bar without newlines is one line). */
export const MAX_LINE_CHARS = 2000;

export class OutputLog {
  private readonly ring: OutputLine[] = [];
  /** Unfinished line per `pid/stream`. */
  private readonly open = new Map<string, string>();

  constructor(
    private readonly maxLines = MAX_LINES,
    private readonly maxChars = MAX_LINE_CHARS,
  ) {}

  started(pid: number, argv: readonly string[], at: Date): void {
    this.add({ at: at.toISOString(), pid, stream: 'process', line: `started: ${argv.join(' ')}` });
  }

  output(pid: number, stream: 'stdout' | 'stderr' | 'pty', data: Buffer, at: Date): void {
    const key = `${pid}/${stream}`;
    const parts = ((this.open.get(key) ?? '') + data.toString('utf8')).split(/\r?\n/);
    const rest = parts.pop()!;
    for (const line of parts) this.add({ at: at.toISOString(), pid, stream, line });
    if (rest.length >= this.maxChars) this.add({ at: at.toISOString(), pid, stream, line: rest });
    else if (rest) this.open.set(key, rest);
    else this.open.delete(key);
  }

  ended(pid: number, status: string, at: Date): void {
    for (const [key, line] of this.open) {
      const [p, stream] = key.split('/') as [string, OutputLine['stream']];
      if (Number(p) !== pid) continue;
      this.add({ at: at.toISOString(), pid, stream, line });
      this.open.delete(key);
    }
    this.add({ at: at.toISOString(), pid, stream: 'process', line: `ended: ${status}` });
  }

  lines(): OutputLine[] {
    return [...this.ring];
  }

  private add(l: OutputLine): void {
    this.ring.push(l.line.length > this.maxChars ? { ...l, line: l.line.slice(0, this.maxChars) } : l);
    if (this.ring.length > this.maxLines) this.ring.splice(0, this.ring.length - this.maxLines);
  }
}
