// Shared set-up for the ns driver tests: a driver with its own node tag and data dir per test
// file, a helper that runs a command to completion, and a leak check over every kernel object
// the driver makes (cgroups, cube-init processes, mounts, sandbox dirs).
import { readdirSync, readFileSync } from 'node:fs';
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execa } from 'execa';
import { afterAll, beforeAll, expect } from 'vitest';
import { nodeTag, newSandboxID } from '../../src/ids.js';
import { Cgroups, HIERARCHIES } from '../../src/runtime/ns/cgroups.js';
import { NsDriver, type NsDriverOptions } from '../../src/runtime/ns/driver.js';
import { TemplateStore } from '../../src/templates/store.js';
import type { ExecRequest, ExitInfo, LaunchSpec, SandboxHandle, TemplateRef } from '../../src/runtime/types.js';
import { unmountStore } from '../helpers/daemon.js';

const repo = join(import.meta.dirname, '..', '..');
/** The loop-mounted store of a test's data dir (sparse: only what sandboxes write takes host space). */
export const STORE_IMAGE_GIB = 2;

export interface Rig {
  tag: string;
  dataDir: string;
  driver: NsDriver;
  templates: TemplateStore;
  host: TemplateRef;
  cgroups: Cgroups;
  spec(over?: Partial<LaunchSpec>): LaunchSpec;
  /** Destroys everything of this node and checks nothing leaked. */
  teardown(): Promise<Leaks>;
}

/** `driver`: extra driver options (the node's declared memory, say). */
export async function makeRig(name: string, driverOpts: Partial<NsDriverOptions> = {}): Promise<Rig> {
  await execa('node', [join(repo, 'scripts', 'build-native.mjs')]);
  const tag = nodeTag(`test-runtime-${name}`);
  const dataDir = await mkdtemp(join(tmpdir(), `cubed-test-runtime-${name}-`));
  const driver = new NsDriver({ dataDir, nodeTag: tag, storeImageGiB: STORE_IMAGE_GIB, ...driverOpts });
  await driver.init();
  await driver.cleanup(new Set()); // leftovers of an earlier run that died
  await driver.init();
  const templates = new TemplateStore(dataDir);
  const host = await templates.resolve('host');
  return {
    tag,
    dataDir,
    driver,
    templates,
    host,
    cgroups: new Cgroups(tag),
    spec: (over = {}) => ({ sandboxID: newSandboxID(), template: host, cpus: 1, memoryMiB: 128, pidsMax: 64, diskGiB: 1, env: {}, ...over }),
    async teardown() {
      try {
        await driver.cleanup(new Set());
        await driver.close({ destroy: true });
        // Killed processes stay zombies until their parent (the launch helper, or host pid 1 for
        // inits an earlier helper forked) reaps them.
        let leaks = findLeaks(tag, dataDir);
        for (let i = 0; i < 40 && leaks.processes.length; i++) {
          await new Promise((r) => setTimeout(r, 50));
          leaks = findLeaks(tag, dataDir);
        }
        return leaks;
      } finally {
        // Also when the driver failed to close: its loop-mounted store (a 2 GiB sparse image) goes.
        await unmountStore(dataDir);
        await rm(dataDir, { recursive: true, force: true });
      }
    },
  };
}

/** Registers the rig's set-up and its teardown with the leak check for the calling test file. */
export function useRig(name: string, driverOpts: Partial<NsDriverOptions> = {}): () => Rig {
  let rig: Rig | undefined;
  beforeAll(async () => {
    rig = await makeRig(name, driverOpts);
  });
  afterAll(async () => {
    if (rig) expect(await rig.teardown()).toEqual(NO_LEAKS);
  });
  return () => {
    if (!rig) throw new Error('rig not set up');
    return rig;
  };
}

export interface RunResult extends ExitInfo {
  stdout: string;
  stderr: string;
}

export async function run(rig: Rig, h: SandboxHandle, argv: string[], req: Omit<ExecRequest, 'argv'> & { input?: string } = {}): Promise<RunResult> {
  const p = rig.driver.exec(h, { ...req, argv, stdin: req.input !== undefined || req.stdin });
  let stdout = '';
  let stderr = '';
  p.stdout.on('data', (b: Buffer) => (stdout += b.toString()));
  p.stderr.on('data', (b: Buffer) => (stderr += b.toString()));
  if (req.input !== undefined) p.stdin!.end(req.input);
  const x = await p.exited;
  return { ...x, stdout, stderr };
}

export interface Leaks {
  cgroups: string[];
  processes: number[];
  mounts: string[];
  dirs: string[];
}

/** Every kernel object of node `tag` still on the host. */
export function findLeaks(tag: string, dataDir: string): Leaks {
  const cg = new Cgroups(tag);
  const parents: [string, string][] = [
    ...HIERARCHIES.map((h): [string, string] => [h, cg.parents[h]]),
    ...(cg.blkio ? [['blkio', cg.blkio] as [string, string]] : []),
  ];
  const cgroups = parents.flatMap(([h, parent]) => {
    try {
      return readdirSync(parent, { withFileTypes: true })
        .filter((e) => e.isDirectory())
        .map((e) => `${h}/${e.name}`);
    } catch {
      return [];
    }
  });
  const processes: number[] = [];
  for (const p of readdirSync('/proc')) {
    if (!/^\d+$/.test(p)) continue;
    try {
      if (readFileSync(`/proc/${p}/cgroup`, 'utf8').includes(`/cube-${tag}/`)) processes.push(Number(p));
    } catch {
      // exited meanwhile
    }
  }
  // The sandbox store stays mounted for the rig's lifetime (closed at teardown): not a sandbox's leak.
  const mounts = readFileSync('/proc/self/mountinfo', 'utf8')
    .split('\n')
    .filter((l) => l.includes(dataDir) && !l.includes(` ${join(dataDir, 'store')} `));
  let dirs: string[] = [];
  try {
    dirs = readdirSync(join(dataDir, 'sandboxes'));
  } catch {
    dirs = [];
  }
  return { cgroups, processes, mounts, dirs };
}

export const NO_LEAKS: Leaks = { cgroups: [], processes: [], mounts: [], dirs: [] };

export async function sandboxDirs(rig: Rig): Promise<string[]> {
  return readdir(join(rig.dataDir, 'sandboxes')).catch(() => []);
}
