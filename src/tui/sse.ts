// Incremental parser for text/event-stream (the WHATWG rules the watch endpoint follows):
// feed chunks as they arrive, get whole messages back; comments (`: ping`) are dropped.

export interface SseMessage {
  event: string;
  data: string;
  id?: string;
}

export class SseParser {
  private buf = '';
  private event = '';
  private data: string[] = [];
  private id: string | undefined;

  /** Parses what `chunk` completes; a partial line waits for the next chunk. */
  push(chunk: string): SseMessage[] {
    this.buf += chunk;
    const out: SseMessage[] = [];
    let nl: number;
    while ((nl = this.buf.search(/\r\n|\r|\n/)) >= 0) {
      const line = this.buf.slice(0, nl);
      const sep = this.buf.startsWith('\r\n', nl) ? 2 : 1;
      // A lone \r at the end of a chunk may be the first half of \r\n: wait for more.
      if (sep === 1 && this.buf[nl] === '\r' && nl === this.buf.length - 1) break;
      this.buf = this.buf.slice(nl + sep);
      const msg = this.line(line);
      if (msg) out.push(msg);
    }
    return out;
  }

  private line(line: string): SseMessage | null {
    if (line === '') {
      if (this.data.length === 0) {
        this.event = '';
        return null;
      }
      const msg: SseMessage = { event: this.event || 'message', data: this.data.join('\n') };
      if (this.id !== undefined) msg.id = this.id;
      this.event = '';
      this.data = [];
      return msg;
    }
    if (line.startsWith(':')) return null;
    const colon = line.indexOf(':');
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? '' : line.slice(colon + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    if (field === 'event') this.event = value;
    else if (field === 'data') this.data.push(value);
    else if (field === 'id') this.id = value;
    return null;
  }
}
