// `cubectl sandbox create|ls|get|exec|shell|egress|pause|resume|rm|snapshot|fork`.
import { Option, type Command } from 'commander';
import type { SandboxLifecycle, SandboxView } from '../../api/types.js';
import { egressRequest } from '../../network/egress.js';
import { diskUse } from '../../tui/format.js';
import { StringDecoder } from 'node:string_decoder';
import { terminalSafe } from '../terminal.js';
import { clientFor, examples, EXIT, ExitError, globals, keyValueArg, numberArg, printJson, table, UsageError } from '../io.js';
import type { EgressRequest } from '../../model/sandbox.js';

const STATES = ['creating', 'running', 'pausing', 'paused', 'resuming', 'destroying', 'gone', 'error', 'lost'] as const;

export function sandboxesTable(list: SandboxView[]): string {
  if (list.length === 0) return 'no sandboxes\n';
  return table(
    ['sandbox', 'state', 'node', 'template', 'cpus', 'mem', 'disk', 'ip', 'started', 'ends', 'reason'],
    list.map((s) => [
      s.sandboxID,
      s.state,
      s.nodeID,
      s.templateID,
      s.spec.cpus,
      `${s.spec.memoryMiB}M`,
      diskUse(s),
      s.ip ?? '-',
      s.startedAt,
      s.endAt,
      s.reason ?? '',
    ]),
  );
}

interface CreateOpts {
  template?: string;
  cpus?: number;
  memoryMib?: number;
  diskGib?: number;
  timeout?: number;
  node?: string;
  runtime?: string;
  env?: Record<string, string>;
  metadata?: Record<string, string>;
  internet?: boolean;
  onTimeout?: 'kill' | 'pause';
  autoResume?: boolean;
  allowOut?: string[];
  denyOut?: string[];
}

function lifecycleOpts(o: CreateOpts): { lifecycle?: SandboxLifecycle } {
  if (o.autoResume && o.onTimeout !== 'pause') throw new UsageError('--auto-resume needs --on-timeout pause');
  return o.onTimeout === 'pause' ? { lifecycle: { onTimeout: 'pause', autoResume: o.autoResume === true } } : {};
}

const EGRESS_HELP = `
Egress: the node's deny_out (private ranges, cloud metadata) is closed to every sandbox; --allow-out
cannot reopen it (refused with 400). See docs/operations.md, "Sandbox network policy".
`;

/** The egress flags shared by create and egress. */
function egressOptions(c: Command): Command {
  return c
    .option('--no-internet', "no internet for it (default: the node's allow_internet_access)")
    .option('--allow-out <cidr,...>', 'destinations it may reach even without internet or inside its --deny-out (IPv4 addresses or CIDRs; repeatable)', listArg)
    .option('--deny-out <cidr,...>', 'destinations it may not reach (repeatable; 0.0.0.0/0 for all)', listArg);
}

function egressOpts(o: CreateOpts): { egress?: EgressRequest } {
  const e = egressRequest(o.internet === false ? false : undefined, o.allowOut, o.denyOut);
  return e ? { egress: e } : {};
}

/** Repeatable, comma-separated list options (--allow-out 1.1.1.1,8.8.8.8 --allow-out 9.9.9.9). */
const listArg = (value: string, previous: string[] = []): string[] => [
  ...previous,
  ...value
    .split(',')
    .map((v) => v.trim())
    .filter(Boolean),
];

interface ExecOpts {
  raw?: boolean;
  user?: string;
  cwd?: string;
  env?: Record<string, string>;
  timeoutMs?: number;
}

export function register(program: Command): void {
  const sandbox = program
    .command('sandbox')
    .summary('create, ls, exec, shell, pause, resume, rm, snapshot, fork sandboxes')
    .description('Create, list, run commands in, pause, resume and remove sandboxes.')
    .addHelpText('after', examples('id=$(cubectl sandbox create)', 'cubectl sandbox exec $id -- sh -c "echo hi"', 'cubectl sandbox rm $id'));

  const create = sandbox
    .command('create')
    .description(
      'Create a sandbox and print its id. Unset options take sandbox.default_* from cubemaster.yaml. A refused create (130597: no node can take it) says which limit refused it.',
    )
    .option('--template <t>', 'template id (default: sandbox.default_template)')
    .option('--cpus <n>', 'vCPUs (default: sandbox.default_spec.cpus)', numberArg({ positive: true }))
    .option('--memory-mib <m>', 'memory limit in MiB (default: sandbox.default_spec.memory_mib)', numberArg({ int: true, min: 16 }))
    .option('--disk-gib <g>', 'writable layer in GiB (default: sandbox.default_spec.disk_gib)', numberArg({ positive: true }))
    .option('--timeout <s>', 'lifetime in seconds (default: sandbox.default_timeout_sec)', numberArg({ int: true, min: 1 }))
    .option('--node <n>', 'place it on this node')
    .addOption(new Option('--runtime <driver>', 'place it only on a node running this runtime driver').choices(['ns', 'microvm', 'sim']))
    .option('--env <k=v>', 'environment variable for every command in it (repeatable)', keyValueArg)
    .option('--metadata <k=v>', 'metadata label (repeatable)', keyValueArg)
    .addOption(new Option('--on-timeout <action>', 'what its timeout does: kill it, or pause it (resume with `sandbox resume`)').choices(['kill', 'pause']))
    .option('--auto-resume', 'with --on-timeout pause: the first request that reaches it (envd, a port) resumes it');
  egressOptions(create)
    .addHelpText(
      'after',
      `${EGRESS_HELP}\nJSON (--json): {"sandboxID": ...} plus the SandboxView fields.\n` +
        examples(
          'cubectl sandbox create',
          'cubectl sandbox create --cpus 2 --memory-mib 1024 --timeout 600 --json',
          'cubectl sandbox create --deny-out 0.0.0.0/0 --allow-out 151.101.0.0/16',
        ),
    )
    .action(async (o: CreateOpts, cmd: Command) => {
      const s = await clientFor(cmd).createSandbox({
        ...(o.template === undefined ? {} : { templateID: o.template }),
        ...(o.cpus === undefined ? {} : { cpus: o.cpus }),
        ...(o.memoryMib === undefined ? {} : { memoryMiB: o.memoryMib }),
        ...(o.diskGib === undefined ? {} : { diskGiB: o.diskGib }),
        ...(o.timeout === undefined ? {} : { timeoutSec: o.timeout }),
        ...(o.node === undefined ? {} : { nodeID: o.node }),
        ...(o.runtime === undefined ? {} : { runtime: o.runtime }),
        ...(o.env === undefined ? {} : { envVars: o.env }),
        ...(o.metadata === undefined ? {} : { metadata: o.metadata }),
        ...egressOpts(o),
        ...lifecycleOpts(o),
      });
      if (globals(cmd).json) printJson(s);
      else process.stdout.write(`${s.sandboxID}\n`);
    });

  sandbox
    .command('ls')
    .description('List sandboxes with state, node, template, spec, address and lifetime.')
    .option('--state <s>', `only these states, comma-separated (${STATES.join(', ')})`)
    .option('--node <n>', 'only sandboxes on this node')
    .option('--template <t>', 'only sandboxes of this template')
    .addHelpText(
      'after',
      `\nJSON (--json): an array of SandboxView: sandboxID, state, nodeID, templateID, startedAt, endAt, spec, ...\n` +
        examples('cubectl sandbox ls', 'cubectl sandbox ls --state paused --json'),
    )
    .action(async (o: { state?: string; node?: string; template?: string }, cmd: Command) => {
      const state = o.state
        ?.split(',')
        .map((s) => s.trim())
        .filter(Boolean);
      const bad = state?.filter((s) => !(STATES as readonly string[]).includes(s));
      if (bad?.length) throw new UsageError(`--state: unknown state ${bad.join(', ')} (known: ${STATES.join(', ')})`);
      const list = await clientFor(cmd).sandboxes({
        ...(state ? { state: state as SandboxView['state'][] } : {}),
        ...(o.node === undefined ? {} : { nodeID: o.node }),
        ...(o.template === undefined ? {} : { templateID: o.template }),
      });
      if (globals(cmd).json) printJson(list);
      else process.stdout.write(sandboxesTable(list));
    });

  sandbox
    .command('get')
    .description(
      'Show sandbox ID: state (and why, for error and lost), node, template, spec, address and lifetime. A sandbox that ended without its client asking (timeout, OOM, node lost, drain, an operator) answers for a day with why, when and where: exit code 1 with that reason.',
    )
    .argument('<id>', 'sandbox id')
    .addHelpText('after', examples('cubectl sandbox get $id', 'cubectl sandbox get $id --json'))
    .action(async (id: string, _o: unknown, cmd: Command) => {
      const s = await clientFor(cmd).sandbox(id);
      if (globals(cmd).json) printJson(s);
      else process.stdout.write(sandboxDetail(s));
    });

  sandbox
    .command('exec')
    .description(
      "Run a command in sandbox ID, streaming its stdout and stderr, and exit with the command's exit code. Put the command after `--` so its options are not read as cubectl's. Interrupting cubectl kills the command.",
    )
    .argument('<id>', 'sandbox id')
    .argument('<command...>', 'command and arguments')
    .option('--user <u>', 'run as this user (root or user)')
    .option('--cwd <dir>', 'working directory inside the sandbox')
    .option('--env <k=v>', 'environment variable (repeatable)', keyValueArg)
    .option('--timeout-ms <ms>', 'kill the command after this many milliseconds', numberArg({ int: true, min: 0 }))
    .option(
      '--raw',
      "write the command's output to a terminal as it is (by default control characters are shown escaped there; a pipe or file always gets the bytes)",
    )
    .addHelpText(
      'after',
      examples(
        'cubectl sandbox exec $id -- uname -a',
        "cubectl sandbox exec $id --user user --cwd /tmp --env A=1 -- sh -c 'echo $A; exit 3'; echo $?   # 1, then 3",
      ),
    )
    .action(async (id: string, argv: string[], o: ExecOpts, cmd: Command) => {
      const abort = new AbortController();
      const stop = () => abort.abort();
      process.once('SIGINT', stop);
      try {
        const events = clientFor(cmd).exec(
          id,
          {
            argv,
            ...(o.env ? { env: o.env } : {}),
            ...(o.cwd ? { cwd: o.cwd } : {}),
            ...(o.user ? { user: o.user } : {}),
            ...(o.timeoutMs === undefined ? {} : { timeoutMs: o.timeoutMs }),
          },
          abort.signal,
        );
        const out = outputTo(process.stdout, o.raw === true);
        const err = outputTo(process.stderr, o.raw === true);
        for await (const ev of events) {
          if (ev.type === 'stdout') out(ev.data);
          else if (ev.type === 'stderr') err(ev.data);
          else if (ev.type === 'end') {
            const why =
              ev.error ?? (ev.oomKilled ? 'killed: out of memory' : ev.timedOut ? 'killed: timeout' : ev.signal ? `killed by ${ev.signal}` : undefined);
            const code = ev.exitCode >= 0 && ev.exitCode <= 255 ? ev.exitCode : 1;
            if (code === 0 && why === undefined) return;
            throw new ExitError(why ?? '', code === 0 ? 1 : code);
          }
        }
        if (abort.signal.aborted) throw new ExitError('interrupted; the command was killed', 130);
        throw new ExitError('the output stream ended before the command did');
      } catch (e) {
        if (abort.signal.aborted && !(e instanceof ExitError)) throw new ExitError('interrupted; the command was killed', 130);
        throw e;
      } finally {
        process.off('SIGINT', stop);
      }
    });

  sandbox
    .command('shell')
    .description(
      "An interactive shell in running sandbox ID: a terminal through envd, as the e2b SDK's sandbox.pty (bash where the template has it, else sh). Every key goes to the shell (ctrl-c interrupts its command); `exit` or ctrl-d ends it, with the shell's exit code. A sandbox that dies or a daemon that goes away ends it with a one-line reason. A paused sandbox is not resumed.",
    )
    .argument('<id>', 'sandbox id')
    .option('--user <u>', 'run as this user (root or user; default user)')
    .addHelpText('after', examples('cubectl sandbox shell $id', 'cubectl sandbox shell $id --user root'))
    .action(async (id: string, o: { user?: string }, cmd: Command) => {
      if (!process.stdin.isTTY || !process.stdout.isTTY)
        throw new UsageError('sandbox shell needs a terminal (stdin and stdout must be a TTY); use sandbox exec for scripts');
      // Loaded here: the Connect client is not every cubectl verb's start-up cost.
      const { runShell, shellAccess, ShellRefused } = await import('../shell.js');
      const client = clientFor(cmd);
      let access;
      try {
        access = await shellAccess(client, id);
      } catch (e) {
        if (e instanceof ShellRefused) throw new ExitError(e.message);
        throw e;
      }
      const end = await runShell(client, access, { input: process.stdin, output: process.stdout }, o.user ? { user: o.user } : {});
      if (end.reason !== undefined) throw new ExitError(`shell in ${id} ended: ${end.reason}`, end.exitCode === 0 ? EXIT.FAILED : end.exitCode);
      if (end.exitCode !== 0) throw new ExitError('', end.exitCode > 255 ? EXIT.FAILED : end.exitCode);
    });

  egressOptions(
    sandbox
      .command('egress')
      .description("Replace the egress rules of running or paused sandbox ID at once; with no option it goes back to the node's defaults. Prints its state.")
      .argument('<id>', 'sandbox id'),
  )
    .addHelpText('after', `${EGRESS_HELP}` + examples('cubectl sandbox egress $id --no-internet --allow-out 151.101.0.0/16', 'cubectl sandbox egress $id'))
    .action(async (id: string, o: CreateOpts, cmd: Command) => {
      const s = await clientFor(cmd).setEgress(id, egressOpts(o).egress ?? {});
      if (globals(cmd).json) printJson(s);
      else process.stdout.write(`${id} ${s.state}\n`);
    });

  const simple = (name: 'resume' | 'rm', description: string, act: (id: string, cmd: Command) => Promise<SandboxView | undefined>, done: string) =>
    sandbox
      .command(name)
      .description(description)
      .argument('<id>', 'sandbox id')
      .addHelpText('after', examples(`cubectl sandbox ${name} $id`))
      .action(async (id: string, _o: unknown, cmd: Command) => {
        const s = await act(id, cmd);
        if (globals(cmd).json) printJson(s ?? { sandboxID: id, removed: true });
        else process.stdout.write(`${id} ${s ? s.state : done}\n`);
      });

  sandbox
    .command('pause')
    .description(
      "Freeze every process of sandbox ID; its memory stays (less the release ratio share, for scheduling). --release frees the memory where the runtime can: a microVM's guest memory goes to a file under the data dir and its QEMU ends (resume restores it, processes kept); an ns sandbox keeps its memory either way.",
    )
    .argument('<id>', 'sandbox id')
    .option('--release', 'free the memory where the runtime can (microvm), as AutoPause and the E2B pause do')
    .addHelpText('after', examples('cubectl sandbox pause $id', 'cubectl sandbox pause --release $id'))
    .action(async (id: string, o: { release?: boolean }, cmd: Command) => {
      const s = await clientFor(cmd).pause(id, o.release ? { release: true } : {});
      if (globals(cmd).json) printJson(s);
      else process.stdout.write(`${id} ${s.state}\n`);
    });

  sandbox
    .command('snapshot')
    .description(
      "Keep sandbox ID's state as a snapshot and print its id; the sandbox goes on as it was (running or paused). An ns snapshot keeps the writable layer (files), not processes or memory: a sandbox made from it (`sandbox create --template SNAPSHOT`) starts its template's init afresh.",
    )
    .argument('<id>', 'sandbox id')
    .option('--name <name>', 'a name to find it by (unique; letters, digits, . _ / -)')
    .addHelpText(
      'after',
      '\nJSON (--json): the SnapshotView: snapshotID, names, sandboxID, nodeID, templateID, runtime, keeps, spec, metadata, createdAt.\n' +
        examples('snap=$(cubectl sandbox snapshot $id --name warm)', 'cubectl sandbox create --template $snap'),
    )
    .action(async (id: string, o: { name?: string }, cmd: Command) => {
      const s = await clientFor(cmd).snapshot(id, o.name);
      if (globals(cmd).json) printJson(s);
      else process.stdout.write(`${s.snapshotID}\n`);
    });

  sandbox
    .command('fork')
    .description(
      'Make N sandboxes from sandbox ID as it is now (a snapshot, N creates from it, the snapshot removed) and print their ids, one a line; a fork that could not start prints "error: ..." in its place and the exit code is 1.',
    )
    .argument('<id>', 'sandbox id')
    .option('-n, --count <n>', 'how many (default 1)', numberArg({ int: true, min: 1 }))
    .option('--timeout <s>', 'their lifetime in seconds (default: sandbox.default_timeout_sec)', numberArg({ int: true, min: 1 }))
    .addHelpText(
      'after',
      '\nJSON (--json): an array with one {sandbox: SandboxView} or {error: {code, message, status}} per fork.\n' +
        examples('cubectl sandbox fork $id -n 20', 'cubectl sandbox fork $id --json | jq -r ".[].sandbox.sandboxID"'),
    )
    .action(async (id: string, o: { count?: number; timeout?: number }, cmd: Command) => {
      const results = await clientFor(cmd).fork(id, { count: o.count ?? 1, ...(o.timeout === undefined ? {} : { timeoutSec: o.timeout }) });
      if (globals(cmd).json) printJson(results);
      else process.stdout.write(results.map((r) => ('sandbox' in r ? r.sandbox.sandboxID : `error: ${r.error.message}`)).join('\n') + '\n');
      const failed = results.filter((r) => 'error' in r).length;
      if (failed > 0) throw new ExitError(`${failed} of ${results.length} forks did not start`);
    });

  simple(
    'resume',
    'Thaw sandbox ID. May be refused (130409) when the release ratio gave its share away and the node is full.',
    (id, cmd) => clientFor(cmd).resume(id),
    'running',
  );
  simple(
    'rm',
    'Destroy sandbox ID and everything it held (processes, cgroups, network slot, writable layer).',
    async (id, cmd) => {
      await clientFor(cmd).deleteSandbox(id);
      return undefined;
    },
    'removed',
  );
}

/**
 * Writes a command's output: a terminal gets it terminal-safe (line breaks, tabs and carriage
 * returns kept, so progress lines still work), unless --raw; a pipe or file gets the bytes.
 */
function outputTo(stream: NodeJS.WriteStream, raw: boolean): (data: Buffer) => void {
  if (raw || !stream.isTTY) return (data) => void stream.write(data);
  const decoder = new StringDecoder('utf8'); // a character split across chunks stays one
  return (data) => void stream.write(terminalSafe(decoder.write(data), '\n\t\r'));
}

/** One sandbox, a field a line. */
export function sandboxDetail(s: SandboxView): string {
  const rows: [string, string | undefined][] = [
    ['id', s.sandboxID],
    ['state', s.reason ? `${s.state} (${s.reason})` : s.state],
    ['node', s.nodeID],
    ['template', s.templateID],
    ['runtime', s.runtime],
    ['spec', `${s.spec.cpus} cpu, ${s.spec.memoryMiB} MiB, ${s.spec.diskGiB} GiB`],
    ['ip', s.ip],
    ['started', s.startedAt],
    ['ends', s.endAt],
    [
      'metadata',
      Object.entries(s.metadata)
        .map(([k, v]) => `${k}=${v}`)
        .join(' ') || undefined,
    ],
  ];
  return rows.flatMap(([k, v]) => (v === undefined ? [] : [`${`${k}:`.padEnd(10)}${v}\n`])).join('');
}
