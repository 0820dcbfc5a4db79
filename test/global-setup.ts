// Runs once in vitest's main process: after every test file has finished, release what
// crashed or killed workers could not (test network ranges and their guard routes, stand-in
// internet hosts).
import { sweepStaleCidrLocks } from './helpers/kernel.js';
import { sweepStaleWanHosts } from './helpers/wan.js';

export function teardown(): void {
  sweepStaleCidrLocks();
  sweepStaleWanHosts();
}
