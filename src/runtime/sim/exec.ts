// The SIMULATION runtime's exec: no process runs. A handful of commands are simulated well
// enough for health checks and tests (see SIMULATED); anything else exits 127 with a stderr
// line saying it was not simulated, so nobody mistakes a sim node for a real one.
//   true, false, exit N, echo [-n] ARGS, printf ARGS (no format directives), pwd, env|printenv [NAME],
//   cat (stdin to stdout; with FILE: the sandbox file), sleep SECONDS,
//   sh|bash -c 'ONE OF THE ABOVE' (one command: no pipes, &&, redirections or expansions).
import { PassThrough } from 'node:stream';
import type { ExecProcess, ExecRequest, ExitInfo } from '../types.js';

export const SIMULATED = ['true', 'false', 'exit', 'echo', 'printf', 'pwd', 'env', 'printenv', 'cat', 'sleep', 'sh -c', 'bash -c'] as const;

/** What a simulated command may touch of its sandbox. */
export interface SimExecContext {
  readFile(path: string): Promise<Buffer>;
  /** Called once the command ended (cpu time accounting). */
  onExit(ms: number): void;
}

/** Splits a one-command shell line into words: single and double quotes group, nothing else is interpreted (pure). */
export function shellWords(line: string): string[] | undefined {
  if (/[|&;<>`$(){}]/.test(line.replace(/'[^']*'/g, '').replace(/"[^"$`]*"/g, ''))) return undefined;
  const words: string[] = [];
  const re = /'([^']*)'|"([^"]*)"|(\S+)/g;
  for (let m = re.exec(line); m; m = re.exec(line)) words.push(m[1] ?? m[2] ?? m[3]!);
  return words;
}

const SIGNALS: Record<string, number> = { SIGKILL: 9, SIGTERM: 15, SIGINT: 2 };

let nextPid = 100_000;

export function simExec(req: ExecRequest, env: Record<string, string>, cwd: string, ctx: SimExecContext): ExecProcess {
  const stdout = new PassThrough();
  const stderr = new PassThrough();
  const stdin = req.stdin ? new PassThrough() : null;
  const t0 = Date.now();
  let settle!: (e: ExitInfo) => void;
  const exited = new Promise<ExitInfo>((r) => (settle = r));
  let done = false;
  let timer: NodeJS.Timeout | undefined;
  let timedOut = false;
  const finish = (exitCode: number, signal?: string) => {
    if (done) return;
    done = true;
    clearTimeout(timer);
    stdout.end();
    stderr.end();
    ctx.onExit(Date.now() - t0);
    settle({ exitCode, ...(signal ? { signal } : {}), oomKilled: false, timedOut });
  };
  const kill = (signal: NodeJS.Signals = 'SIGKILL') => finish(128 + (SIGNALS[signal] ?? 9), signal);
  if (req.timeoutMs && req.timeoutMs > 0) {
    timer = setTimeout(() => {
      timedOut = true;
      kill('SIGKILL');
    }, req.timeoutMs);
  }

  let argv = req.argv;
  if ((argv[0] === 'sh' || argv[0] === 'bash' || argv[0]?.endsWith('/sh') || argv[0]?.endsWith('/bash')) && argv[1] === '-c') {
    const words = shellWords(argv[2] ?? '');
    argv = words ?? ['\0unsupported', argv[2] ?? ''];
  }
  const [cmd = '', ...args] = argv;
  const out = (s: string) => stdout.write(s);
  // Output is written on the next tick so that callers attach their readers first, as with a real process.
  setImmediate(() => {
    const name = cmd.slice(cmd.lastIndexOf('/') + 1);
    switch (name) {
      case 'true':
      case '':
        return finish(0);
      case 'false':
        return finish(1);
      case 'exit':
        return finish(Number(args[0] ?? 0) & 255);
      case 'echo': {
        const n = args[0] === '-n';
        out((n ? args.slice(1) : args).join(' ') + (n ? '' : '\n'));
        return finish(0);
      }
      case 'printf':
        out(args.join(''));
        return finish(0);
      case 'pwd':
        out(`${cwd}\n`);
        return finish(0);
      case 'env':
      case 'printenv':
        if (args[0] !== undefined) {
          if (env[args[0]] === undefined) return finish(1);
          out(`${env[args[0]]}\n`);
        } else
          out(
            Object.entries(env)
              .map(([k, v]) => `${k}=${v}\n`)
              .join(''),
          );
        return finish(0);
      case 'sleep': {
        const s = Number(args[0]);
        if (!Number.isFinite(s) || s < 0) {
          stderr.write(`sleep: invalid time interval '${args[0] ?? ''}'\n`);
          return finish(1);
        }
        setTimeout(() => finish(0), s * 1000).unref();
        return;
      }
      case 'cat':
        if (args.length > 0) {
          void Promise.all(args.map((p) => ctx.readFile(p))).then(
            (bufs) => {
              for (const b of bufs) stdout.write(b);
              finish(0);
            },
            (e: Error) => {
              stderr.write(`cat: ${e.message}\n`);
              finish(1);
            },
          );
          return;
        }
        if (!stdin) return finish(0);
        stdin.on('data', (c: Buffer) => !done && stdout.write(c));
        stdin.on('end', () => finish(0));
        return;
      default:
        stderr.write(`sim runtime: '${cmd === '\0unsupported' ? args[0] : argv.join(' ')}' is not simulated (simulated: ${SIMULATED.join(', ')})\n`);
        return finish(127);
    }
  });
  return { pid: nextPid++, stdout, stderr, stdin, exited, kill };
}
