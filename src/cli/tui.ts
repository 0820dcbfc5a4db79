// cubectl-tui: the operations console. Parses flags, finds (or, as root, starts) the
// daemon, then mounts the Ink app. Ink is imported only after CI is cleared from the
// environment: Ink decides at import time to render only the last frame when CI is set.
import { spawn } from 'node:child_process';
import { accessSync, constants, mkdirSync, openSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Command, InvalidArgumentError, Option } from 'commander';
import { SKIN_NAMES, type SkinName } from '../tui/skins.js';
import { apiKey, apiUrls, DEFAULT_API, DEFAULT_DATA_DIR, EXIT } from './io.js';

const KEY_FILE = join(DEFAULT_DATA_DIR, 'api-key');

const HELP_AFTER = `
Views (switch with tab, 1-9 or :name): nodes, sandboxes, pool, events, config, triage,
templates, snapshots, keys.
Press ? inside the console for every key; docs/console.md has the same list.

Connection:
  The console reads one watch stream (GET /admin/v1/watch) and repaints at most once
  per --refresh. When the stream drops, the header turns STALE with the reason and the
  console reconnects with backoff. With no --api and no CUBE_API_URL it connects to
  ${DEFAULT_API}; if nothing answers there and it runs as root, it
  starts the bundled daemon (bin/cubed) in the background, logging to /var/log/cubed.log (or
  ${DEFAULT_DATA_DIR}/cubed.log), and says so on the screen's last line. Several
  comma-separated URLs are control-plane replicas: the console starts on the first that
  answers and moves to the next when its stream drops.

Environment:
  CUBE_API_URL   same as --api (the flag wins)
  CUBE_API_KEY   API key (else E2B_API_KEY, else ${KEY_FILE} when readable)
  NO_COLOR       any value: no colours, whatever --skin says

Terminal:
  Needs 80x24 or more. Under tmux, TERM=xterm-256color helps when colours look wrong.
  The mouse is left to the terminal (text selection works); q or ctrl-c restores it.

Examples:
  cubectl-tui
  cubectl-tui --api http://10.0.0.5:3000 --readonly
  NO_COLOR=1 cubectl-tui --refresh 1000
`;

interface Flags {
  api?: string[];
  readonly: boolean;
  refresh: number;
  skin: SkinName;
}

function parseRefresh(v: string): number {
  const n = Number(v);
  if (!Number.isInteger(n) || n < 50 || n > 60_000) throw new InvalidArgumentError('an integer number of milliseconds between 50 and 60000');
  return n;
}

function parseUrls(v: string): string[] {
  try {
    return apiUrls(v);
  } catch (e) {
    throw new InvalidArgumentError((e as Error).message);
  }
}

async function healthy(baseUrl: string): Promise<string | null> {
  try {
    const res = await fetch(new URL('/health', baseUrl), { signal: AbortSignal.timeout(1500) });
    return res.ok ? null : `HTTP ${res.status}`;
  } catch (e) {
    const cause = (e as { cause?: { code?: string; message?: string } }).cause;
    return cause?.code ?? cause?.message ?? (e as Error).message;
  }
}

function writableLog(): string {
  for (const path of ['/var/log/cubed.log', join(DEFAULT_DATA_DIR, 'cubed.log')]) {
    try {
      mkdirSync(dirname(path), { recursive: true });
      return (openSync(path, 'a'), path);
    } catch {
      // try the next place
    }
  }
  throw new Error('no writable place for the daemon log (/var/log or /var/lib/cubed)');
}

/** Starts bin/cubed detached (it outlives the console) and waits until /health answers. */
async function startBundledDaemon(baseUrl: string): Promise<string> {
  const bin = fileURLToPath(new URL('../../../bin/cubed', import.meta.url));
  accessSync(bin, constants.R_OK);
  const log = writableLog();
  const fd = openSync(log, 'a');
  const child = spawn(process.execPath, [bin], { detached: true, stdio: ['ignore', fd, fd] });
  child.unref();
  const until = Date.now() + 30_000;
  let why: string | null = 'not started';
  while (Date.now() < until) {
    if (child.exitCode !== null) throw new Error(`the daemon exited with code ${child.exitCode}; see ${log}`);
    why = await healthy(baseUrl);
    if (why === null) return `no daemon answered on ${baseUrl}: started the bundled cubed in the background (pid ${child.pid}, log ${log})`;
    await new Promise((r) => setTimeout(r, 250));
  }
  throw new Error(`started cubed (pid ${child.pid}) but ${baseUrl} did not answer in 30 s (${why}); see ${log}`);
}

async function main(argv: string[]): Promise<void> {
  const program = new Command('cubectl-tui')
    .description(
      'Operations console for cubed: nodes, density, sandboxes (a shell in one), NIC pool, events, config, bottleneck triage, templates, snapshots, API keys',
    )
    .option('--api <urls>', `admin API address; several comma-separated replicas are tried in turn (env CUBE_API_URL; default ${DEFAULT_API})`, parseUrls)
    .option('--readonly', 'bind no key that changes anything (they vanish from help too)', false)
    .option('--refresh <ms>', 'repaint at most once per this many milliseconds', parseRefresh, 250)
    .addOption(new Option('--skin <name>', 'colours').choices(SKIN_NAMES).default('dark'))
    .addHelpText('after', HELP_AFTER)
    // Usage errors: commander's one-line reason, exit 2 as every cubectl verb.
    .exitOverride((err) => process.exit(err.exitCode === 0 ? EXIT.OK : EXIT.USAGE));
  program.parse(argv);
  const flags = program.opts<Flags>();
  const env = process.env.CUBE_API_URL;
  let urls: string[];
  try {
    urls = flags.api ?? apiUrls(env ?? DEFAULT_API);
  } catch (e) {
    process.stderr.write(`cubectl-tui: CUBE_API_URL: ${(e as Error).message}\n`);
    process.exit(EXIT.USAGE);
  }
  if (!process.stdout.isTTY || !process.stdin.isTTY) {
    process.stderr.write('cubectl-tui: needs a terminal (stdin and stdout must be a TTY); use cubectl --json for scripts\n');
    process.exit(EXIT.USAGE);
  }
  // The first replica that answers; the console fails over to the others when its stream drops.
  const answers = await Promise.all(urls.map(healthy));
  const up = answers.findIndex((a) => a === null);
  let note = '';
  if (up < 0) {
    const down = urls.map((u, i) => `${u} (${answers[i]})`).join(', ');
    if (!flags.api && !env && process.getuid?.() === 0) {
      try {
        note = await startBundledDaemon(urls[0]!);
      } catch (e) {
        process.stderr.write(`cubectl-tui: ${(e as Error).message}\n`);
        process.exit(EXIT.UNREACHABLE);
      }
    } else note = `${down} does not answer; retrying`;
  } else if (up > 0) urls = [...urls.slice(up), ...urls.slice(0, up)];
  delete process.env.CI;
  delete process.env.CONTINUOUS_INTEGRATION;
  const { runConsole } = await import('../tui/run.js');
  // Said on screen (stderr is hidden under the alternate screen): where the daemon came from.
  await runConsole({
    target: { baseUrl: urls[0]!, urls, apiKey: apiKey(DEFAULT_DATA_DIR) ?? '' },
    readonly: flags.readonly,
    refreshMs: flags.refresh,
    skin: flags.skin,
    note,
  });
}

main(process.argv).catch((e: unknown) => {
  process.stderr.write(`cubectl-tui: ${(e as Error).message}\n`);
  process.exit(EXIT.FAILED);
});
