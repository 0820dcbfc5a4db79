// An interactive shell in a sandbox: a terminal (PTY) through envd's process.Process service, the
// way the e2b SDK's `sandbox.pty` does it against cubed: Start with a pty streams the output,
// SendInput carries each read of the keyboard, Update the new size after a SIGWINCH. One
// implementation for `cubectl sandbox shell ID` and the console's shell key (src/tui/shell.ts).
// The caller's terminal goes raw for the shell's lifetime and is given back as it was.
import { ConnectError, createClient, type Client } from '@connectrpc/connect';
import { createConnectTransport } from '@connectrpc/connect-node';
import { Process } from '../api/envd/gen/process/process_pb.js';
import type { SandboxView } from '../api/types.js';
import { CubeClientError, DaemonUnreachableError, type CubeClient } from './client.js';

/** bash where the template has it (the host template does), else sh; both as login shells. */
const SHELL = ['/bin/sh', '-c', 'if command -v bash >/dev/null 2>&1; then exec bash -il; fi; exec sh -il'] as const;

/**
 * Terminal modes a shell may leave on when it is killed rather than exits (readline's bracketed
 * paste and application cursor keys, a colour, a hidden cursor): set back when it ends.
 */
const SANE = '\x1b[0m\x1b[?25h\x1b[?2004l\x1b[?1l\x1b>';

/** What envd needs to reach a sandbox: where, which, and its access token. */
export interface ShellAccess {
  baseUrl: string;
  sandboxID: string;
  token: string;
}

/** Why a shell was not opened: one line for the operator (the sandbox is not running, unknown, the daemon is away). */
export class ShellRefused extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ShellRefused';
  }
}

/** The terminal a shell runs on: the process's own stdin and stdout, or stand-ins in tests. */
export interface ShellTerminal {
  input: NodeJS.ReadableStream & { isTTY?: boolean; isRaw?: boolean; setRawMode?(raw: boolean): unknown; ref?(): unknown; unref?(): unknown };
  output: NodeJS.WritableStream & { columns?: number; rows?: number; on(e: 'resize', f: () => void): unknown; off(e: 'resize', f: () => void): unknown };
}

/** How a shell ended: the shell's exit code, and a one-line reason when it did not end by exiting (killed, the sandbox died, the daemon went away). */
export interface ShellEnd {
  exitCode: number;
  reason?: string;
}

/** `sandbox ID is paused`, with the reason a dead one carries. */
const stateOf = (s: SandboxView): string => `sandbox ${s.sandboxID} is ${s.state}${s.reason ? ` (${s.reason})` : ''}`;

const errText = (e: unknown): string => (e instanceof ConnectError ? e.rawMessage : e instanceof Error ? e.message : String(e));

/** The sandbox, running, and its envd token; ShellRefused with the reason otherwise (a paused sandbox is not resumed). */
export async function shellAccess(client: CubeClient, sandboxID: string): Promise<ShellAccess> {
  try {
    const s = await client.sandbox(sandboxID);
    if (s.state !== 'running') throw new ShellRefused(`${stateOf(s)}: a shell needs it running${s.state === 'paused' ? '; resume it first' : ''}`);
    return await client.envdAccess(sandboxID);
  } catch (e) {
    if (e instanceof CubeClientError || e instanceof DaemonUnreachableError) throw new ShellRefused(e.message);
    throw e;
  }
}

/**
 * Why the shell ended without exiting: the sandbox's own state or tombstone when the daemon still
 * answers and the sandbox is no longer running (destroyed, timed out, paused), else `fallback`
 * (the stream's own reason), with whether cubed answers at all.
 */
async function whyEnded(client: CubeClient, sandboxID: string, fallback: string): Promise<string> {
  try {
    const s = await client.sandbox(sandboxID);
    return s.state === 'running' ? fallback : `the sandbox is ${s.state}`;
  } catch (e) {
    // A tombstone: why it died, in a line (its whole story is in `sandbox get` and the events).
    if (e instanceof CubeClientError && typeof e.details?.reason === 'string') return `the sandbox ended: ${e.details.reason}`;
    if (e instanceof CubeClientError) return e.message;
    return e instanceof DaemonUnreachableError ? `${fallback}; cubed does not answer` : fallback;
  }
}

/**
 * Runs the shell on `term` until it exits, the sandbox dies or the daemon goes away. The input
 * is read raw (every key goes to the shell: ctrl-c interrupts the command in the sandbox, not
 * this process) and written in order, one SendInput at a time with what came meanwhile joined.
 */
export async function runShell(client: CubeClient, access: ShellAccess, term: ShellTerminal, opts: { user?: string } = {}): Promise<ShellEnd> {
  const headers = {
    'e2b-sandbox-id': access.sandboxID,
    'x-access-token': access.token,
    authorization: `Basic ${Buffer.from(`${opts.user ?? 'user'}:`).toString('base64')}`,
  };
  const proc: Client<typeof Process> = createClient(Process, createConnectTransport({ baseUrl: access.baseUrl, httpVersion: '1.1', useBinaryFormat: true }));
  const abort = new AbortController();
  const size = () => ({ cols: term.output.columns ?? 80, rows: term.output.rows ?? 24 });
  let pid = 0;
  let queued: Buffer[] = [];
  let sending = false;
  const pump = async (): Promise<void> => {
    if (sending || pid === 0) return;
    sending = true;
    try {
      while (queued.length > 0 && !abort.signal.aborted) {
        const bytes = Buffer.concat(queued);
        queued = [];
        await proc.sendInput(
          { process: { selector: { case: 'pid', value: pid } }, input: { input: { case: 'pty', value: bytes } } },
          { headers, signal: abort.signal },
        );
      }
    } catch {
      // The process ended or the daemon went away: the output stream says which.
      queued = [];
    } finally {
      sending = false;
    }
  };
  // Read as Ink reads (`readable`, then read() until null), so the console's Ink takes the
  // keyboard back after it the way it lets it go: a `data` listener and pause() left the
  // terminal's stream paused, and the console deaf after the first shell.
  const onReadable = () => {
    let chunk: Buffer | string | null;
    while ((chunk = term.input.read() as Buffer | string | null) !== null) queued.push(typeof chunk === 'string' ? Buffer.from(chunk, 'utf8') : chunk);
    void pump();
  };
  const onResize = () => {
    if (pid !== 0)
      proc
        .update({ process: { selector: { case: 'pid', value: pid } }, pty: { size: size() } }, { headers, signal: abort.signal })
        .catch(() => undefined /* resizing is best effort: the next one or the exit says more */);
  };
  const wasRaw = term.input.isRaw === true;
  if (term.input.isTTY) term.input.setRawMode?.(true);
  term.input.ref?.();
  term.input.on('readable', onReadable);
  term.output.on('resize', onResize);
  let end: ShellEnd | undefined;
  let streamWhy = 'the connection to cubed ended before the shell did';
  try {
    const stream = proc.start(
      { process: { cmd: SHELL[0], args: SHELL.slice(1), envs: { TERM: process.env.TERM ?? 'xterm-256color', LANG: 'C.UTF-8' } }, pty: { size: size() } },
      { headers, signal: abort.signal },
    );
    for await (const r of stream) {
      const ev = r.event?.event;
      if (ev?.case === 'start') {
        pid = ev.value.pid;
        void pump();
      } else if (ev?.case === 'data' && ev.value.output.case !== undefined) term.output.write(ev.value.output.value);
      else if (ev?.case === 'end') {
        end = ev.value.exited ? { exitCode: ev.value.exitCode } : { exitCode: 1, reason: ev.value.error ?? ev.value.status };
        break;
      }
    }
  } catch (e) {
    streamWhy = `the connection to cubed was lost (${errText(e)})`;
  } finally {
    abort.abort();
    term.input.off('readable', onReadable);
    term.input.unref?.(); // as Ink leaves it: a keyboard nobody reads holds no process open
    term.output.off('resize', onResize);
    term.output.write(SANE);
    if (term.input.isTTY) term.input.setRawMode?.(wasRaw);
  }
  if (end && end.reason === undefined) return end;
  // Killed or cut off: what the daemon says of the sandbox now.
  return { exitCode: end?.exitCode ?? 1, reason: await whyEnded(client, access.sandboxID, end?.reason ?? streamWhy) };
}
