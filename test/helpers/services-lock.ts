// Test files share the machine's Redis and MariaDB, and one of them restarts both (the cluster
// tests of surviving a restart). A reader-writer lock across vitest's worker processes keeps the
// restart away from every other file using them: users hold it shared for as long as their
// cluster-state scope lives (clusterStateScope), the restart takes it exclusive. Files in
// /tmp/cube-test-services: `shared-<pid>-<n>` per holder, `exclusive` with the owner's pid.
// Waits are synchronous (the worker has nothing else to do), markers of dead pids are stale.
import { mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { alive } from './kernel.js';

const DIR = '/tmp/cube-test-services';
const EXCLUSIVE = join(DIR, 'exclusive');
const WAIT_MS = 100;
/** A holder that never lets go (a file that forgot to drop its scope) must not stall the run for ever. */
const GIVE_UP_MS = 10 * 60_000;
let seq = 0;

function sleepSync(ms: number): void {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}

/** The pid holding the exclusive lock, when it is another live process. */
function exclusiveOwner(): number | undefined {
  let pid: number;
  try {
    pid = Number(readFileSync(EXCLUSIVE, 'utf8'));
  } catch {
    return undefined;
  }
  if (pid === process.pid) return undefined;
  if (alive(pid)) return pid;
  rmSync(EXCLUSIVE, { force: true });
  return undefined;
}

function otherSharedHolders(): string[] {
  return readdirSync(DIR).filter((f) => {
    const m = /^shared-(\d+)-\d+$/.exec(f);
    if (!m || Number(m[1]) === process.pid) return false;
    if (alive(Number(m[1]))) return true;
    rmSync(join(DIR, f), { force: true });
    return false;
  });
}

/** Blocks while another process restarts the services; returns the release. */
export function holdServicesShared(): () => void {
  mkdirSync(DIR, { recursive: true });
  const until = Date.now() + GIVE_UP_MS;
  for (;;) {
    if (exclusiveOwner() === undefined) {
      const me = join(DIR, `shared-${process.pid}-${seq++}`);
      writeFileSync(me, '');
      // Marked first, checked second: either the restart sees this marker or this sees the restart.
      if (exclusiveOwner() === undefined || Date.now() > until) return () => rmSync(me, { force: true });
      rmSync(me, { force: true });
    }
    sleepSync(WAIT_MS);
  }
}

/**
 * For a file that restarts the services while it holds them shared (its cluster stays up): two
 * such files in parallel would each wait for the other's shared hold to end before restarting,
 * a deadlock only GIVE_UP_MS breaks. They take this first, in beforeAll, so they run one at a
 * time; returns the release (also done at exit).
 */
export function holdServicesRestarter(): () => void {
  mkdirSync(DIR, { recursive: true });
  const path = join(DIR, 'restarter');
  for (;;) {
    try {
      writeFileSync(path, String(process.pid), { flag: 'wx' });
      break;
    } catch {
      let owner = 0;
      try {
        owner = Number(readFileSync(path, 'utf8'));
      } catch {
        continue; // just released
      }
      if (owner === process.pid) break;
      if (owner > 0 && !alive(owner)) rmSync(path, { force: true });
      else sleepSync(WAIT_MS);
    }
  }
  const release = () => {
    try {
      if (Number(readFileSync(path, 'utf8')) === process.pid) rmSync(path, { force: true });
    } catch {
      // already gone
    }
  };
  process.once('exit', release);
  return release;
}

/** Runs `fn` while no other process uses the services (this process's own holds do not count). */
export async function withServicesExclusive<T>(fn: () => Promise<T>): Promise<T> {
  mkdirSync(DIR, { recursive: true });
  const until = Date.now() + GIVE_UP_MS;
  for (;;) {
    try {
      writeFileSync(EXCLUSIVE, String(process.pid), { flag: 'wx' });
      break;
    } catch {
      if (exclusiveOwner() === undefined) rmSync(EXCLUSIVE, { force: true }); // stale, or ours from a crash
      await new Promise((r) => setTimeout(r, WAIT_MS));
    }
  }
  try {
    while (otherSharedHolders().length > 0 && Date.now() < until) await new Promise((r) => setTimeout(r, WAIT_MS));
    return await fn();
  } finally {
    rmSync(EXCLUSIVE, { force: true });
  }
}
