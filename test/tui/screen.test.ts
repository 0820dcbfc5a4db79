import { describe, expect, it } from 'vitest';
import { diffFrame, ScreenSink } from '../../src/tui/screen.js';

describe('diffFrame', () => {
  it.each([
    ['first frame writes every line at its row', [], ['a', 'b'], '\x1b[1;1H\x1b[2Ka\x1b[2;1H\x1b[2Kb'],
    ['an unchanged frame writes nothing', ['a', 'b'], ['a', 'b'], ''],
    ['only the changed line', ['a', 'b', 'c'], ['a', 'B', 'c'], '\x1b[2;1H\x1b[2KB'],
    ['a shorter frame blanks the rows it left', ['a', 'b', 'c'], ['a'], '\x1b[2;1H\x1b[2K\x1b[3;1H\x1b[2K'],
  ])('%s', (_name, prev, next, want) => expect(diffFrame(prev, next)).toBe(want));
});

describe('ScreenSink', () => {
  it('writes the diff between frames in synchronized output and counts the bytes', () => {
    const written: string[] = [];
    const sink = new ScreenSink({ columns: 100, rows: 30, write: (s: string) => written.push(s) });
    sink.write('head\nrow 1\nrow 2\n');
    sink.write('head\nrow 1\nrow two\n');
    sink.write('head\nrow 1\nrow two\n');
    expect(written).toEqual([
      '\x1b[?2026h\x1b[1;1H\x1b[2Khead\x1b[2;1H\x1b[2Krow 1\x1b[3;1H\x1b[2Krow 2\x1b[?2026l',
      '\x1b[?2026h\x1b[3;1H\x1b[2Krow two\x1b[?2026l',
    ]);
    expect(sink.bytesWritten).toBe(written.join('').length);
    sink.close();
    sink.write('gone\n');
    expect(written).toHaveLength(2);
    expect([sink.columns, sink.rows]).toEqual([100, 30]);
  });
});

describe('ScreenSink on resize', () => {
  it('clears and repaints every line of the next frame, and tells Ink', async () => {
    const { EventEmitter } = await import('node:events');
    const term = Object.assign(new EventEmitter(), {
      columns: 100,
      rows: 30,
      written: [] as string[],
      write(s: string) {
        term.written.push(s);
      },
    });
    const sink = new ScreenSink(term);
    let told = 0;
    sink.on('resize', () => told++);
    sink.write('a\nb\n');
    term.columns = 80;
    term.emit('resize');
    sink.write('a\nb\n');
    expect(told).toBe(1);
    expect(sink.columns).toBe(80);
    expect(term.written.slice(1)).toEqual(['\x1b[2J', '\x1b[?2026h\x1b[1;1H\x1b[2Ka\x1b[2;1H\x1b[2Kb\x1b[?2026l']);
  });
});

describe('ScreenSink while a shell has the terminal', () => {
  it('writes nothing while suspended, not even on a resize, then draws the last frame whole', async () => {
    const { EventEmitter } = await import('node:events');
    const term = Object.assign(new EventEmitter(), {
      columns: 80,
      rows: 24,
      written: [] as string[],
      write(s: string) {
        term.written.push(s);
      },
    });
    const sink = new ScreenSink(term);
    sink.write('a\nb\n');
    sink.suspend();
    sink.write('a\nB\n');
    term.emit('resize');
    sink.write('A\nB\n');
    expect(term.written).toHaveLength(1);
    sink.resume();
    expect(term.written.slice(1)).toEqual(['\x1b[?2026h\x1b[1;1H\x1b[2KA\x1b[2;1H\x1b[2KB\x1b[?2026l']);
    sink.write('A\nB\n');
    expect(term.written).toHaveLength(2);
  });
});
