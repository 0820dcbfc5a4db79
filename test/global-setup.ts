// Runs once in vitest's main process: after every test file has finished, release what
// crashed or killed workers could not (test network ranges and their guard routes).
import { sweepStaleCidrLocks } from './helpers/kernel.js';

export function teardown(): void {
  sweepStaleCidrLocks();
}
