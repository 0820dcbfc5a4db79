// Text that came from a sandbox or an API client, made safe for the operator's terminal: every
// C0 control (ESC starts CSI/OSC sequences: a sandbox's metadata could retitle the terminal,
// move the cursor or rewrite the screen), DEL and every C1 control (U+0080-U+009F; U+009B is a
// one-character CSI, U+009D an OSC) is written as a visible escape, so what an operator reads is
// what was sent and nothing acts on the terminal. Pure; cubectl and the console apply it where
// data from the API enters (the client and the watch stream) and to command output sent to a TTY.

/** What stays as is by default: line breaks and tabs (a build log, an error with several lines). */
export const KEEP_LINES = '\n\t';

const CONTROL = /[\u0000-\u001f\u007f-\u009f]/g;

/** `text` with every control character but those in `keep` shown as `\xHH` (C0, DEL) or `\u00HH` (C1). */
export function terminalSafe(text: string, keep: string = KEEP_LINES): string {
  return text.replace(CONTROL, (c) => {
    if (keep.includes(c)) return c;
    const code = c.charCodeAt(0);
    return code < 0x80 ? `\\x${code.toString(16).padStart(2, '0')}` : `\\u00${code.toString(16)}`;
  });
}

/** A parsed JSON value with terminalSafe applied to every string in it, keys included (pure). */
export function terminalSafeDeep<T>(value: T): T {
  if (typeof value === 'string') return terminalSafe(value) as T;
  if (Array.isArray(value)) return value.map((v: unknown) => terminalSafeDeep(v)) as T;
  if (value && typeof value === 'object') {
    // fromEntries defines own properties: a key `__proto__` stays a key, never the prototype.
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [terminalSafe(k), terminalSafeDeep(v)])) as T;
  }
  return value;
}
