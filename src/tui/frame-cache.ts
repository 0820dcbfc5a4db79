// Ink 6.8's output stage, made to cost what changed. Per frame Ink turns every line back into
// styled characters (`tokenize`: a grapheme segmenter per character, then an object per character
// with its own copy of its styles), fills a grid of width x height character objects and joins
// every row of it back into a string, changed or not. A CPU profile of bench/tui-render.ts put 40%
// of a frame there (our rows and selectors under 3%); with the usage poll, where every visible
// row's CPU% moves, 35% plus most of the 28% spent collecting garbage. This replaces `get` of
// Ink's Output by one that
//  - carries parsed lines from one frame to the next: a line is looked up in this frame's
//    entries, then the last frame's; older entries are dropped (at most two frames are held);
//  - carries whole rows the same way: a row whose writes (column and text) are the last frame's
//    is that frame's string, with no grid cells and no joining;
//  - parses a line of printable ASCII and SGR sequences (all the console draws) without the
//    segmenter, the characters of one style sharing one styles array (nothing writes to them);
//  - joins a row without diffing the styles of neighbours that share them.
// The frames are the bytes Ink's own stage writes (test/tui/frame-cache.test.tsx compares them
// for every view over updates, and for clips, wide characters and links). `Output` is not
// exported by Ink, so it is reached by file; Ink is pinned (package.json) and when its shape is not
// the one below, nothing is changed and Ink renders as it always did.
import { createRequire } from 'node:module';
import path from 'node:path';
import { pathToFileURL } from 'node:url';

interface AnsiCode {
  type: 'ansi';
  code: string;
  endCode: string;
}

interface StyledChar {
  type: 'char';
  value: string;
  fullWidth: boolean;
  styles: readonly AnsiCode[];
}

/** @alcalzone/ansi-tokenize, as Ink uses it. */
interface Tokenizer {
  tokenize(text: string): ({ type: 'char' } | AnsiCode)[];
  reduceAnsiCodesIncremental(codes: readonly AnsiCode[], more: readonly AnsiCode[]): AnsiCode[];
  diffAnsiCodes(from: readonly AnsiCode[], to: readonly AnsiCode[]): AnsiCode[];
  ansiCodesToString(codes: readonly AnsiCode[]): string;
}

interface InkCaches {
  styledChars: Map<string, StyledChar[]>;
  widths: Map<string, number>;
  getStyledChars(line: string): StyledChar[];
  getStringWidth(text: string): number;
  getWidestLine(text: string): number;
}

interface Clip {
  x1?: number;
  x2?: number;
  y1?: number;
  y2?: number;
}

type Operation =
  | { type: 'write'; x: number; y: number; text: string; transformers: ((line: string, index: number) => string)[] }
  | { type: 'clip'; clip: Clip }
  | { type: 'unclip' };

interface InkOutput {
  width: number;
  height: number;
  operations: Operation[];
  caches: InkCaches;
  get(): { output: string; height: number };
}

type OutputClass = { new (o: { width: number; height: number }): InkOutput; prototype: InkOutput };

/** The two frames' maps: what this frame parsed and joined, and what the last one did. */
export interface FrameCache {
  current: InkCaches & { rows: Map<string, string> };
  previous: InkCaches & { rows: Map<string, string> };
}

let installing: Promise<FrameCache | null> | undefined;

/** Installs the cache once per process; resolves to null when Ink's internals are not the expected ones. */
export function installFrameCache(): Promise<FrameCache | null> {
  return (installing ??= install());
}

/** Printable ASCII and SGR sequences only: each character one column, one grapheme. */
const PLAIN = /^(?:[\x20-\x7e]|\x1b\[[0-9;]*m)*$/;
const NO_STYLES: readonly AnsiCode[] = Object.freeze([]);
const BLANK: StyledChar = Object.freeze({ type: 'char', value: ' ', fullWidth: false, styles: NO_STYLES });

async function install(): Promise<FrameCache | null> {
  const entry = createRequire(import.meta.url).resolve('ink');
  const inkRequire = createRequire(entry);
  const load = async <T>(file: string): Promise<T> => (await import(pathToFileURL(file).href)) as T;
  const Output = (await load<{ default?: OutputClass }>(path.join(path.dirname(entry), 'output.js'))).default;
  if (typeof Output !== 'function' || typeof Output.prototype.get !== 'function') return null;
  // Ink's private shape, checked before it is relied on (another Ink version may lack it).
  const probe = new Output({ width: 0, height: 0 }) as Partial<InkOutput>;
  const caches = probe.caches as Partial<InkCaches> | undefined;
  if (
    !Array.isArray(probe.operations) ||
    !(caches?.styledChars instanceof Map) ||
    !(caches.widths instanceof Map) ||
    typeof caches.getStyledChars !== 'function' ||
    typeof caches.getStringWidth !== 'function' ||
    typeof caches.getWidestLine !== 'function'
  )
    return null;
  const tok = await load<Partial<Tokenizer>>(path.join(path.dirname(inkRequire.resolve('@alcalzone/ansi-tokenize/package.json')), 'build/index.js'));
  const sliceAnsi = (await load<{ default: (s: string, from: number, to: number) => string }>(inkRequire.resolve('slice-ansi'))).default;
  if (
    typeof tok.tokenize !== 'function' ||
    typeof tok.reduceAnsiCodesIncremental !== 'function' ||
    typeof tok.diffAnsiCodes !== 'function' ||
    typeof tok.ansiCodesToString !== 'function' ||
    typeof sliceAnsi !== 'function'
  )
    return null;
  const t = tok as Tokenizer;

  const Caches = (caches as InkCaches).constructor as new () => InkCaches;
  const parse = Caches.prototype.getStyledChars;
  const measure = Caches.prototype.getStringWidth;
  /** An SGR sequence's codes, split as tokenize splits compound ones (a handful of distinct ones per console). */
  const sgrCodes = new Map<string, AnsiCode[]>();
  const codesOf = (seq: string): AnsiCode[] => {
    let codes = sgrCodes.get(seq);
    if (!codes) sgrCodes.set(seq, (codes = t.tokenize(seq).filter((x): x is AnsiCode => x.type === 'ansi')));
    return codes;
  };
  /** What tokenize + styledCharsFromTokens give for a PLAIN line, one styles array per run of one style. */
  const parsePlain = (line: string): StyledChar[] => {
    const out: StyledChar[] = [];
    let styles: readonly AnsiCode[] = NO_STYLES;
    for (let i = 0; i < line.length;) {
      if (line.charCodeAt(i) === 27) {
        const end = line.indexOf('m', i) + 1;
        styles = Object.freeze(t.reduceAnsiCodesIncremental(styles, codesOf(line.slice(i, end))));
        i = end;
      } else out.push({ type: 'char', value: line[i++]!, fullWidth: false, styles });
    }
    return out;
  };
  const cache = {} as FrameCache;
  const carried = <V>(own: Map<string, V>, last: Map<string, V>, key: string, compute: () => V): V => {
    let v = own.get(key);
    if (v === undefined) {
      v = last.get(key) ?? compute();
      own.set(key, v);
    }
    return v;
  };
  class CarriedCaches extends Caches {
    readonly rows = new Map<string, string>();
    override getStyledChars(line: string): StyledChar[] {
      return carried(this.styledChars, cache.previous.styledChars, line, () => (PLAIN.test(line) ? parsePlain(line) : parse.call(this, line)));
    }
    override getStringWidth(text: string): number {
      return carried(this.widths, cache.previous.widths, text, () => measure.call(this, text));
    }
  }
  cache.current = new CarriedCaches();
  cache.previous = new CarriedCaches();

  /** styledCharsToString, skipping the diff where neighbours share their styles (the same string). */
  const join = (chars: readonly StyledChar[]): string => {
    let out = '';
    let prev: readonly AnsiCode[] | undefined;
    for (const c of chars) {
      if (prev === undefined) out += t.ansiCodesToString(c.styles);
      else if (c.styles !== prev && (c.styles.length > 0 || prev.length > 0)) out += t.ansiCodesToString(t.diffAnsiCodes(prev, c.styles));
      out += c.value;
      prev = c.styles;
    }
    if (prev && prev.length > 0) out += t.ansiCodesToString(t.diffAnsiCodes(prev, []));
    return out;
  };

  /** One row as Ink's grid would print it: blanks, each write's characters from its column on, trailing blanks cut. */
  function drawRow(this: InkOutput, writes: readonly { x: number; line: string }[]): string {
    const row: (StyledChar | undefined)[] = new Array<StyledChar>(this.width).fill(BLANK);
    for (const w of writes) {
      let x = w.x;
      for (const c of this.caches.getStyledChars(w.line)) {
        row[x] = c;
        const width = Math.max(1, this.caches.getStringWidth(c.value));
        for (let k = 1; k < width; k++) row[x + k] = { type: 'char', value: '', fullWidth: false, styles: c.styles };
        x += width;
      }
    }
    return join(row.filter((c): c is StyledChar => c !== undefined)).trimEnd();
  }

  /** Ink's Output.get (6.8), row by row: the same clipping and placing, a row joined only when its writes changed. */
  Output.prototype.get = function (this: InkOutput) {
    const current = cache.current;
    this.caches = current;
    try {
      const writes: { x: number; line: string }[][] = Array.from({ length: this.height }, () => []);
      const clips: Clip[] = [];
      for (const op of this.operations) {
        if (op.type === 'clip') clips.push(op.clip);
        if (op.type === 'unclip') clips.pop();
        if (op.type !== 'write' || !op.text) continue;
        let { x, y } = op;
        let lines = op.text.split('\n');
        const clip = clips.at(-1);
        if (clip) {
          const horizontal = typeof clip.x1 === 'number' && typeof clip.x2 === 'number';
          const vertical = typeof clip.y1 === 'number' && typeof clip.y2 === 'number';
          if (horizontal) {
            const width = this.caches.getWidestLine(op.text);
            if (x + width < clip.x1! || x > clip.x2!) continue;
          }
          if (vertical && (y + lines.length < clip.y1! || y > clip.y2!)) continue;
          if (horizontal) {
            lines = lines.map((line) => {
              const from = x < clip.x1! ? clip.x1! - x : 0;
              const width = this.caches.getStringWidth(line);
              const to = x + width > clip.x2! ? clip.x2! - x : width;
              return sliceAnsi(line, from, to);
            });
            if (x < clip.x1!) x = clip.x1!;
          }
          if (vertical) {
            const from = y < clip.y1! ? clip.y1! - y : 0;
            const to = y + lines.length > clip.y2! ? clip.y2! - y : lines.length;
            lines = lines.slice(from, to);
            if (y < clip.y1!) y = clip.y1!;
          }
        }
        let offsetY = 0;
        for (let [index, line] of lines.entries()) {
          const row = writes[y + offsetY];
          // As Ink: a line below the frame is dropped, and so is every line after it.
          if (!row) continue;
          for (const transform of op.transformers) line = transform(line, index);
          row.push({ x, line });
          offsetY++;
        }
      }
      const rows = writes.map((w) => {
        if (w.length === 0) return '';
        const key = `${this.width}\u0000${w.map((p) => `${p.x}\u0000${p.line}`).join('\u0000')}`;
        return carried(current.rows, cache.previous.rows, key, () => drawRow.call(this, w));
      });
      return { output: rows.join('\n'), height: this.height };
    } finally {
      cache.previous = current;
      cache.current = new CarriedCaches();
    }
  };
  return cache;
}
