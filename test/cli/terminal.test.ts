// Text from a sandbox or a client never acts on the operator's terminal: the one sanitizer,
// as a table, and its deep form over parsed JSON (keys too, `__proto__` a key like any other).
import { describe, expect, it } from 'vitest';
import { terminalSafe, terminalSafeDeep } from '../../src/cli/terminal.js';

describe('terminalSafe', () => {
  it.each([
    ['plain text', 'hello world', 'hello world'],
    ['unicode stays', 'naïve — 日本', 'naïve — 日本'],
    ['OSC title change (BEL)', '\x1b]0;pwned\x07', '\\x1b]0;pwned\\x07'],
    ['OSC 52 clipboard write (ST)', '\x1b]52;c;cm0gLXJmIH4=\x1b\\', '\\x1b]52;c;cm0gLXJmIH4=\\x1b\\'],
    ['CSI clear screen + cursor home', '\x1b[2J\x1b[H', '\\x1b[2J\\x1b[H'],
    ['SGR colour', '\x1b[31mred\x1b[0m', '\\x1b[31mred\\x1b[0m'],
    ['C1 CSI (U+009B)', '\u009b2J', '\\u009b2J'],
    ['C1 OSC (U+009D) and ST (U+009C)', '\u009d0;x\u009c', '\\u009d0;x\\u009c'],
    ['NUL, BEL, backspace, DEL', 'a\x00b\x07c\x08d\x7f', 'a\\x00b\\x07c\\x08d\\x7f'],
    ['carriage return (overwrites the line)', 'ok\rFAKE', 'ok\\x0dFAKE'],
    ['line breaks and tabs kept', 'a\n\tb', 'a\n\tb'],
  ])('%s', (_what, input, want) => {
    expect(terminalSafe(input)).toBe(want);
  });

  it('keeps only what it is told to keep', () => {
    expect(terminalSafe('a\nb\rc\x1b', '')).toBe('a\\x0ab\\x0dc\\x1b');
    expect(terminalSafe('50%\r100%\r\n\x1b[K', '\n\t\r')).toBe('50%\r100%\r\n\\x1b[K');
  });
});

describe('terminalSafeDeep', () => {
  it('makes every string of a JSON value safe, keys included, and leaves other values alone', () => {
    const hostile = JSON.parse('{"metadata":{"\\u001b]0;k\\u0007":"\\u009b2J","__proto__":"x"},"n":3,"ok":true,"none":null,"list":["\\u001b[H",1]}') as Record<
      string,
      unknown
    >;
    const safe = terminalSafeDeep(hostile);
    expect(safe).toEqual({ metadata: { '\\x1b]0;k\\x07': '\\u009b2J', ['__proto__']: 'x' }, n: 3, ok: true, none: null, list: ['\\x1b[H', 1] });
    expect(Object.getPrototypeOf((safe as { metadata: object }).metadata)).toBe(Object.prototype);
    expect(Object.keys((safe as { metadata: object }).metadata)).toContain('__proto__');
    expect(JSON.stringify(safe)).not.toMatch(/[\u0080-\u009f]|[^\\]\\u00(1b|07)/); // JSON writes a raw ESC as \u001b, C1 as itself
  });
});
