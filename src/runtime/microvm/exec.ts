// A command in a microVM: an EXEC request on a channel of the guest agent, its output, stdin,
// signals and pty resizes as frames of that channel (native/cube-agent.c runs it in the guest).
import { PassThrough } from 'node:stream';
import { CubeError } from '../../errors.js';
import { DEFAULT_PATH, sandboxUser } from '../../templates/store.js';
import type { ExecProcess, ExecRequest, ExitInfo, SandboxHandle } from '../types.js';
import { type AgentConnection, T, fields, splitFields } from './protocol.js';

/** Runs `req` in the VM of `h` through its agent (`vm.running`: its QEMU runs; `vm.env`: the sandbox's environment). */
export function agentExec(
  h: SandboxHandle,
  req: ExecRequest,
  vm: { running: () => boolean; env: () => Record<string, string> | undefined; agent: () => Promise<AgentConnection> },
): ExecProcess {
  if (!req.argv.length || req.argv.some((a) => typeof a !== 'string' || a.includes('\0'))) {
    throw new CubeError('BAD_REQUEST', 'exec needs a non-empty argv of strings without NUL');
  }
  for (const [k, v] of Object.entries(req.env ?? {})) {
    if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(k) || typeof v !== 'string' || v.includes('\0')) {
      throw new CubeError('BAD_REQUEST', `invalid environment variable '${k}'`);
    }
  }
  if (!vm.running()) throw new CubeError('NOT_FOUND', `sandbox ${h.sandboxID} is not running`);
  const userName = req.user ?? 'user';
  const user = sandboxUser(userName);
  const env: Record<string, string> = {
    PATH: DEFAULT_PATH,
    HOME: user.home,
    USER: userName,
    LOGNAME: userName,
    ...vm.env(),
    ...req.env,
  };
  const pty = (req as ExecRequest & { pty?: { cols: number; rows: number } }).pty;
  const payload = fields(
    user.uid,
    user.gid,
    req.cwd ?? user.home,
    `${req.stdin || pty ? 's' : ''}${pty ? 'p' : ''}`,
    pty?.cols ?? 0,
    pty?.rows ?? 0,
    req.argv.length,
    ...req.argv,
    ...Object.entries(env).map(([k, v]) => `${k}=${v}`),
  );
  const stdout = new PassThrough();
  const stderr = new PassThrough();
  let timedOut = false;
  let conn: AgentConnection | undefined;
  let chan = 0;
  const pending: [number, Buffer | undefined][] = [];
  // A closed connection has already failed the exec (its channel's handler): a later signal
  // (the timeout's, a kill) has nothing to reach. Thrown from the timer, it took the daemon down
  // when a releasing pause ended QEMU under a command with a timeout.
  const send = (type: number, data?: Buffer) => {
    if (conn && chan) {
      if (!conn.closed) conn.send(type, chan, data);
    } else pending.push([type, data]);
  };
  const exited = new Promise<ExitInfo>((resolve, reject) => {
    const fail = (e: Error) => {
      clearTimeout(timer);
      stdout.end();
      stderr.end();
      reject(new CubeError('EXEC_FAILED', `exec in ${h.sandboxID}: ${e.message}`, { cause: e }));
    };
    vm.agent().then((c) => {
      conn = c;
      const ch = c.channel((f) => {
        if (f.type === T.STDOUT) stdout.write(Buffer.from(f.payload));
        else if (f.type === T.STDERR) stderr.write(Buffer.from(f.payload));
        else if (f.type === T.ERROR) {
          ch.done();
          fail(new Error(splitFields(f.payload)[1] ?? 'agent error'));
        } else if (f.type === T.EXIT) {
          ch.done();
          clearTimeout(timer);
          const [code, sig] = splitFields(f.payload).map(Number) as [number, number];
          stdout.end();
          stderr.end();
          resolve({ exitCode: code, ...(sig ? { signal: signalName(sig) } : {}), oomKilled: false, timedOut });
        }
      }, fail);
      chan = ch.chan;
      c.send(T.EXEC, chan, payload);
      for (const [type, data] of pending.splice(0)) c.send(type, chan, data);
    }, fail);
  });
  const timer = req.timeoutMs
    ? setTimeout(() => {
        timedOut = true;
        send(T.SIGNAL, fields(9));
      }, req.timeoutMs)
    : undefined;
  const stdin = req.stdin || pty ? new PassThrough().on('data', (d: Buffer) => send(T.STDIN, d)).on('end', () => send(T.STDIN_EOF)) : null;
  const proc: ExecProcess & { resize?: (cols: number, rows: number) => void } = {
    pid: -1,
    stdout,
    stderr,
    stdin,
    exited,
    kill: (signal: NodeJS.Signals = 'SIGKILL') => send(T.SIGNAL, fields(signalNumber(signal))),
  };
  if (pty) proc.resize = (cols, rows) => send(T.RESIZE, fields(cols, rows));
  return proc;
}

const SIGNALS: Record<string, number> = { SIGHUP: 1, SIGINT: 2, SIGQUIT: 3, SIGKILL: 9, SIGUSR1: 10, SIGUSR2: 12, SIGTERM: 15 };
function signalNumber(s: NodeJS.Signals): number {
  return SIGNALS[s] ?? 9;
}
function signalName(n: number): string {
  return Object.entries(SIGNALS).find(([, v]) => v === n)?.[0] ?? `SIG${n}`;
}
