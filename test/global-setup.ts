// Runs once in vitest's main process. Before the files: starts building the code-interpreter
// image in the background when the run includes its test (a clean machine builds it with
// mmdebstrap: about 3 min, mostly download and dpkg, which the files' own waits then overlap; the
// test's own build.mjs waits for this one through the cache lock and finds the archive). After
// every file: release what crashed or killed workers could not (test network ranges and their
// guard routes, stand-in internet hosts).
import { spawn, type ChildProcess } from 'node:child_process';
import { openSync, rmSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { sweepStaleCidrLocks } from './helpers/kernel.js';
import { sweepStaleWanHosts } from './helpers/wan.js';

const ROOT = resolve(import.meta.dirname, '..');
let prebuild: ChildProcess | undefined;
let prebuildLog: string | undefined;

/** The run's file filters (vitest run [filters...]): none, or one that names the code-interpreter test. */
function runsCodeInterpreter(argv: string[]): boolean {
  const filters = argv.slice(argv.indexOf('run') + 1).filter((a) => !a.startsWith('-'));
  return filters.length === 0 || filters.some((f) => 'test/e2b/code-interpreter.test.ts'.includes(f) || f.includes('code-interpreter'));
}

export function setup(): void {
  if (process.getuid?.() !== 0 || !process.argv.includes('run') || !runsCodeInterpreter(process.argv)) return;
  prebuildLog = join('/tmp', `cubed-test-prebuild-${process.pid}.log`);
  const log = openSync(prebuildLog, 'w');
  prebuild = spawn(process.execPath, [join(ROOT, 'recipes/code-interpreter/build.mjs')], { stdio: ['ignore', log, log], detached: true }); // its own group: ended with mmdebstrap under it
  prebuild.on('error', () => undefined); // the test's own build says what is wrong
}

export async function teardown(): Promise<void> {
  // Done by now when its test ran; otherwise (a run cut short) it is ended with it.
  if (prebuild && prebuild.exitCode === null && prebuild.signalCode === null) {
    const exited = new Promise((r) => prebuild!.once('exit', r));
    process.kill(-prebuild.pid!, 'SIGTERM');
    await exited;
  }
  // Kept only when the build failed (the test's own build says so too).
  if (prebuildLog && prebuild?.exitCode === 0) rmSync(prebuildLog, { force: true });
  sweepStaleCidrLocks();
  sweepStaleWanHosts();
}
