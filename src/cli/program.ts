// cubectl's command tree and error reporting. Exit codes: 0 ok, 1 the operation failed, 2 usage or invalid
// input, 3 the daemon cannot be reached. Errors are one line on stderr, `cubectl: <reason>`.
import { Command, CommanderError } from 'commander';
import { CubeError, ErrorTable } from '../errors.js';
import { DensityInputError } from '../model/density.js';
import { CubeClientError, DaemonUnreachableError, DEFAULT_TIMEOUT_MS } from './client.js';
import { commands } from './commands/index.js';
import { DEFAULT_API, DEFAULT_DATA_DIR, EXIT, ExitError, UsageError } from './io.js';

export function buildProgram(): Command {
  const program = new Command('cubectl')
    .description('Operate cubed: nodes, sandboxes, config and events through its admin API, and the density model offline.')
    .option('--api <url>', `cubed API address, or several control replicas comma-separated, tried in turn (env CUBE_API_URL; default ${DEFAULT_API})`)
    .option('--json', 'machine-readable output (JSON) instead of text')
    .option(
      '--request-timeout <s>',
      `seconds one control replica may take to start answering before cubectl gives up on it and, for a read or an idempotent change, asks the next (env CUBE_API_TIMEOUT; default ${DEFAULT_TIMEOUT_MS / 1000}; creates, resumes, forks and exec wait at least 60)`,
    )
    .option('--data-dir <dir>', `where to find the api-key file cubed wrote, when CUBE_API_KEY and E2B_API_KEY are unset (default ${DEFAULT_DATA_DIR})`)
    .exitOverride()
    .configureHelp({ sortSubcommands: true })
    .configureOutput({
      outputError: (str, write) =>
        write(
          `cubectl: ${str
            .replace(/^error: /, '')
            .replace(/\s*\n\s*/g, ' ')
            .trim()}\n`,
        ),
    })
    .addHelpText(
      'after',
      `
Exit status: 0 ok, 1 the operation failed, 2 usage error or invalid input, 3 cubed unreachable.
The API key is read from CUBE_API_KEY, else E2B_API_KEY, else <data-dir>/api-key.

Examples:
  cubectl density --node-cpus 128 --node-mem-gib 251 --release-ratio 0.75
  cubectl nodes
  cubectl sandbox create --memory-mib 1024
  cubectl sandbox exec <id> -- uname -a
  cubectl config set host.quota.paused_resource_release_ratio 0.75
  cubectl events --follow
`,
    );
  for (const register of commands) register(program);
  // `bench --json FILE` takes a value where every other verb's --json is a flag, so program
  // options are read only before the verb, and every verb also carries the global options
  // (so `cubectl sandbox ls --api URL --json` keeps working).
  program.enablePositionalOptions();
  const addGlobals = (c: Command): void => {
    for (const sub of c.commands) addGlobals(sub);
    for (const o of program.options) if (!c.options.some((mine) => mine.long === o.long)) c.option(o.flags, o.description);
  };
  program.commands.forEach(addGlobals);
  return program;
}

/** Runs cubectl with argv (without `node` and the script) and returns the exit code. */
export async function run(argv: string[]): Promise<number> {
  const program = buildProgram();
  try {
    await program.parseAsync(argv, { from: 'user' });
    return EXIT.OK;
  } catch (e) {
    return report(e);
  }
}

function report(e: unknown): number {
  const fail = (msg: string, code: number) => {
    process.stderr.write(`cubectl: ${msg.replace(/\s*\n\s*/g, '; ')}\n`);
    return code;
  };
  if (e instanceof CommanderError) {
    // Commander has printed its message (help, version, or the usage error) already.
    return e.exitCode === 0 ? EXIT.OK : EXIT.USAGE;
  }
  if (e instanceof UsageError || e instanceof DensityInputError) return fail(e.message, EXIT.USAGE);
  if (e instanceof CubeError) return fail(e.message, e.kind === 'CONFIG_INVALID' || e.kind === 'BAD_REQUEST' ? EXIT.USAGE : EXIT.FAILED);
  if (e instanceof DaemonUnreachableError)
    return fail(`${e.message}; start it with \`cubed\` (as root), or point --api / CUBE_API_URL at a running one`, EXIT.UNREACHABLE);
  if (e instanceof CubeClientError) {
    if (e.status === 401) return fail(`${e.message} (set CUBE_API_KEY, or run as a user who can read <data-dir>/api-key)`, EXIT.FAILED);
    if (e.status === 403 && e.code !== ErrorTable.REGISTRY_AUTH.code)
      return fail(`${e.message} (cubectl needs an admin key: CUBE_API_KEY, or <data-dir>/api-key)`, EXIT.FAILED);
    // The daemon refused the input itself (400): the user's to fix, like a usage error.
    return fail(e.message, e.status === 400 ? EXIT.USAGE : EXIT.FAILED);
  }
  if (e instanceof ExitError) return e.message ? fail(e.message, e.exitCode) : e.exitCode;
  return fail(e instanceof Error ? e.message : String(e), EXIT.FAILED);
}
