// Ink 6.8 turns every line of every frame back into styled characters (`tokenize`, a
// grapheme segmenter per character, then one object per character): a CPU profile of
// bench/tui-render.ts put 40% of the frame there, our rows and selectors under 3%. Its caches
// for that live in one `Output`, which is built per frame, so a row that did not change is
// parsed again on every update. This carries the parsed lines from one frame to the next:
// a line is looked up in this frame's entries, then the last frame's; entries older than the
// last frame are dropped, so the cache holds at most two frames of lines. CPU p50 per update at
// 1000 sandboxes went from 11-15 ms to 5-7 ms (docs/benchmarks.md, "Console render").
// `Output` is not exported by Ink, so it is reached by file; Ink is pinned (package.json) and
// when its shape is not the one below, nothing is changed and Ink renders as it always did.
import { createRequire } from 'node:module';
import path from 'node:path';
import { pathToFileURL } from 'node:url';

interface InkCaches {
  styledChars: Map<string, unknown>;
  widths: Map<string, number>;
  getStyledChars(line: string): unknown;
  getStringWidth(text: string): number;
}

interface InkOutput {
  caches: InkCaches;
  get(): { output: string; height: number };
}

type OutputClass = { new (o: { width: number; height: number }): InkOutput; prototype: InkOutput };

/** The two frames' maps: what this frame parsed and what the last one did. */
export interface FrameCache {
  current: InkCaches;
  previous: InkCaches;
}

let installing: Promise<FrameCache | null> | undefined;

/** Installs the cache once per process; resolves to null when Ink's internals are not the expected ones. */
export function installFrameCache(): Promise<FrameCache | null> {
  return (installing ??= install());
}

async function install(): Promise<FrameCache | null> {
  const entry = createRequire(import.meta.url).resolve('ink');
  const mod = (await import(pathToFileURL(path.join(path.dirname(entry), 'output.js')).href)) as { default?: OutputClass };
  const Output = mod.default;
  if (typeof Output !== 'function' || typeof Output.prototype.get !== 'function') return null;
  const probe = new Output({ width: 0, height: 0 }).caches;
  if (!(probe?.styledChars instanceof Map) || !(probe.widths instanceof Map) || typeof probe.getStyledChars !== 'function' || typeof probe.getStringWidth !== 'function') return null;
  const Caches = probe.constructor as new () => InkCaches;
  const parse = Caches.prototype.getStyledChars;
  const measure = Caches.prototype.getStringWidth;
  const cache: FrameCache = { current: new Caches(), previous: new Caches() };
  const carried = <V>(own: Map<string, V>, last: Map<string, V>, key: string, compute: () => V): V => {
    let v = own.get(key);
    if (v === undefined) {
      v = last.get(key) ?? compute();
      own.set(key, v);
    }
    return v;
  };
  class CarriedCaches extends Caches {
    override getStyledChars(line: string): unknown {
      return carried(this.styledChars, cache.previous.styledChars, line, () => parse.call(this, line));
    }
    override getStringWidth(text: string): number {
      return carried(this.widths, cache.previous.widths, text, () => measure.call(this, text));
    }
  }
  cache.current = new CarriedCaches();
  const get = Output.prototype.get;
  Output.prototype.get = function (this: InkOutput) {
    this.caches = cache.current;
    try {
      return get.call(this);
    } finally {
      cache.previous = cache.current;
      cache.current = new CarriedCaches();
    }
  };
  return cache;
}
