// startDaemon: a real `cubed --role all` (node bin/cubed, the built JS: run `npm run build`
// first) on a free loopback port, for tests that drive the daemon over HTTP (admin API,
// E2B SDK, cubectl, console). Stable API; other test suites depend on it.
//
//   const d = await startDaemon({ master: { host: { quota: { paused_resource_release_ratio: 0.5 } } } });
//   try { await fetch(`${d.url}/admin/v1/nodes`, { headers: { 'x-api-key': d.apiKey } }) }
//   finally { await d.stop() }            // or in afterAll
//
// What you get: its own node id (so its own tag for kernel objects), its own pool CIDR and
// sandbox host ids (a daemon refuses to start beside a live one holding either), a data dir and config dir under /tmp/cubed-test-*, a random API key (given through
// CUBE_API_KEY), and these defaults, deep-merged under your overrides:
//   cubelet.toml: declared [quota] 64 cpus / 256 GiB (fits any test), tap_init_num 4, microvm_tap_init_num 2
//   cubemaster.yaml: default_spec 1 cpu / 256 MiB / 1 GiB, rate limit 1000/s, 1 GiB reserve,
//     and the live `cpu` filter off (it refuses creates when host CPU use is >= 80%, which
//     parallel test runs on 2 cores reach all the time; the cpu quota still counts in density).
// stop({ destroy = true }): SIGTERM (graceful: sandboxes stay), or when destroying SIGUSR2 (the
// daemon removes everything as it stops; a daemon killed -9 is started once more with
// --destroy-on-exit to re-adopt and remove it); then it checks that no
// kernel object of the node's tag is left (throws listing them, after purging) and removes
// the dirs. restart(): graceful stop + start on the same dirs and port (re-adoption).
// kill9(): SIGKILL, nothing cleaned; follow with restart() or stop().
// The daemon's output goes to <dir>/daemon.log (kept in the error message when start fails).
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { createSocket } from 'node:dgram';
import { createWriteStream, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { join, resolve } from 'node:path';
import { execa } from 'execa';
import { stringify as toToml } from 'smol-toml';
import { stringify as toYaml } from 'yaml';
import { nodeTag } from '../../src/ids.js';
import { TEST_HOST_ID_RANGES, countKernelObjects, purgeNetwork, testCidr, testHostIdBase, uniqueNodeID, type KernelObjects } from './kernel.js';

export type Tree = { [k: string]: unknown };

export interface StartDaemonOptions {
  /** Deep-merged over the defaults into cubemaster.yaml. */
  master?: Tree;
  /** Deep-merged over the defaults into cubelet.toml. */
  cubelet?: Tree;
  /** Extra environment for the daemon. */
  env?: Record<string, string>;
  /** Extra command-line arguments. */
  args?: string[];
  /** Outside vitest (bench scripts): a node id and pool CIDR of the caller's choosing instead of the locked test ones. */
  nodeID?: string;
  cidr?: string;
  /** Options for node itself, before bin/cubed (e.g. --cpu-prof). */
  nodeArgs?: string[];
  /** The shipped defaults (benchmarks of what users run): none of the test settings below, only the node id, dirs, listen address and pool CIDR. */
  shipped?: boolean;
  /** Files written into the data dir before the first start (name -> content). */
  dataDirFiles?: Record<string, string>;
}

/**
 * A node sized for two sandboxes of the default spec, paused ones releasing all their memory:
 * 256 MiB spec -> footprint 302 MiB; (1400 - 1024 reserve) x 2 oversell = 752 MiB quota.
 */
export const TWO_SANDBOX_NODE: StartDaemonOptions = {
  cubelet: { quota: { cpus: 8, memory_mib: 1400 } },
  master: { host: { quota: { paused_resource_release_ratio: 1 } } },
};

export interface TestDaemon {
  /** http://127.0.0.1:<port> */
  url: string;
  apiKey: string;
  nodeID: string;
  /** The tag of the node's kernel objects (a fresh data dir's: nodeTag of the node id). */
  tag: string;
  dataDir: string;
  configDir: string;
  /** Pid of the current daemon process (changes on restart). */
  pid: number;
  stop(opts?: { destroy?: boolean }): Promise<void>;
  kill9(): Promise<void>;
  restart(): Promise<void>;
}

const ROOT = resolve(import.meta.dirname, '../..');
const BIN = join(ROOT, 'bin/cubed');

export function merge(base: Tree, over: Tree | undefined): Tree {
  const out: Tree = { ...base };
  for (const [k, v] of Object.entries(over ?? {})) {
    const b = out[k];
    out[k] = v && typeof v === 'object' && !Array.isArray(v) && b && typeof b === 'object' && !Array.isArray(b) ? merge(b as Tree, v as Tree) : v;
  }
  return out;
}

export function freePort(): Promise<number> {
  return new Promise((res, rej) => {
    const s = createServer();
    s.once('error', rej);
    s.listen(0, '127.0.0.1', () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => res(port));
    });
  });
}

/** A UDP port free on 127.0.0.1 now (api.dns listeners). */
export function freeUdpPort(): Promise<number> {
  return new Promise((res) => {
    const s = createSocket('udp4').bind(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => res(port));
    });
  });
}

export function exited(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((r) => child.once('exit', () => r()));
}

export async function waitHealthy(url: string, child: ChildProcess, logPath: string, timeoutMs = 60_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (child.exitCode !== null || child.signalCode !== null) break;
    try {
      const r = await fetch(`${url}/health`);
      if (r.ok) return;
    } catch {
      // not listening yet
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  const log = readFileSync(logPath, 'utf8').split('\n').slice(-20).join('\n');
  child.kill('SIGKILL');
  throw new Error(`cubed did not become healthy (exit ${child.exitCode ?? child.signalCode ?? 'none'}); last log lines:\n${log}`);
}

/**
 * Kernel objects of the tag once the host has finished reaping: sandbox inits re-adopted
 * after a restart are orphans whose exit status the host's pid 1 collects on its own time,
 * so a just-killed init may still be listed for a moment. Anything still there after the
 * grace period is a leak.
 */
export async function settledKernelObjects(tag: string, graceMs = 10_000): Promise<KernelObjects> {
  const deadline = Date.now() + graceMs;
  for (;;) {
    const left = await countKernelObjects(tag);
    if (Object.values(left).every((n) => n === 0) || Date.now() > deadline) return left;
    await new Promise((r) => setTimeout(r, 200));
  }
}

/** Unmounts a sandbox store --destroy-on-exit left mounted under the data dir (a leak); whether there was one. */
export async function unmountStore(dataDir: string): Promise<boolean> {
  const store = join(dataDir, 'store');
  if (
    !readFileSync('/proc/self/mounts', 'utf8')
      .split('\n')
      .some((l) => l.split(' ')[1] === store)
  )
    return false;
  await execa('umount', ['-l', store], { reject: false });
  return true;
}

const live = new Set<ChildProcess>();
process.once('exit', () => {
  for (const c of live) c.kill('SIGKILL');
});

export async function startDaemon(opts: StartDaemonOptions = {}): Promise<TestDaemon> {
  const nodeID = opts.nodeID ?? uniqueNodeID('cubed');
  const dir = mkdtempSync('/tmp/cubed-test-');
  const configDir = join(dir, 'config');
  const dataDir = join(dir, 'data');
  mkdirSync(configDir);
  mkdirSync(dataDir);
  for (const [name, text] of Object.entries(opts.dataDirFiles ?? {})) writeFileSync(join(dataDir, name), text);
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const apiKey = `e2b_${randomBytes(20).toString('hex')}`;
  const network = { cidr: opts.cidr ?? testCidr() };
  // Host ids apart from every other live test daemon's (the shipped default outside vitest: bench scripts).
  const identity = !process.env.VITEST ? {} : { identity: { host_id_base: testHostIdBase(), host_id_ranges: TEST_HOST_ID_RANGES } };
  const cubelet = merge(
    opts.shipped
      ? { node_id: nodeID, data_dir: dataDir, ...identity, plugins: { 'io.cubelet.internal.v1.network': network } }
      : {
          node_id: nodeID,
          data_dir: dataDir,
          ...identity,
          quota: { cpus: 64, memory_mib: 262_144 },
          plugins: { 'io.cubelet.internal.v1.network': { tap_init_num: 4, microvm_tap_init_num: 2, ...network } },
        },
    opts.cubelet,
  );
  const master = merge(
    opts.shipped
      ? { api: { listen: `127.0.0.1:${port}` } }
      : {
          api: { listen: `127.0.0.1:${port}`, rate_limit_per_sec: 1000 },
          scheduler: {
            node_max_mem_reserved_in_mb: 1024,
            filter: { enable_filters: ['mem', 'disk', 'disk_quota', 'realtime_create_num', 'template_locality', 'mvm_num'] },
          },
          sandbox: { default_spec: { cpus: 1, memory_mib: 256, disk_gib: 1 } },
        },
    opts.master,
  );
  writeFileSync(join(configDir, 'cubelet.toml'), toToml(cubelet));
  writeFileSync(join(configDir, 'cubemaster.yaml'), toYaml(master));
  const logPath = join(dir, 'daemon.log');

  const launch = async (extra: string[] = []): Promise<ChildProcess> => {
    const log = createWriteStream(logPath, { flags: 'a' });
    const child = spawn(
      process.execPath,
      [...(opts.nodeArgs ?? []), BIN, '--config-dir', configDir, '--data-dir', dataDir, '--listen', `127.0.0.1:${port}`, ...(opts.args ?? []), ...extra],
      {
        env: { ...process.env, CUBE_API_KEY: apiKey, ...opts.env },
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    child.stdout!.pipe(log, { end: false });
    child.stderr!.pipe(log, { end: false });
    live.add(child);
    child.once('exit', () => {
      live.delete(child);
      log.end();
    });
    await waitHealthy(url, child, logPath).catch(async (e: unknown) => {
      await exited(child); // killed by waitHealthy: its helpers die with it
      throw e;
    });
    return child;
  };

  const term = async (c: ChildProcess, signal: 'SIGTERM' | 'SIGUSR2' = 'SIGTERM') => {
    if (c.exitCode === null && c.signalCode === null) {
      c.kill(signal);
      const t = setTimeout(() => c.kill('SIGKILL'), 60_000);
      await exited(c);
      clearTimeout(t);
    }
  };

  // The tag the data dir records (a fresh one: nodeTag of the node id; one given a tag keeps it).
  // A simulated node records none.
  const recordedTag = () => {
    try {
      return readFileSync(join(dataDir, 'node-tag'), 'utf8').trim() || nodeTag(nodeID);
    } catch {
      return nodeTag(nodeID);
    }
  };
  /** Purges what the node left; removes its dir when nothing was left, else keeps it (its log) and throws. */
  const sweep = async (tag: string): Promise<void> => {
    const left: Record<string, number> = { ...(await settledKernelObjects(tag)), store: (await unmountStore(dataDir)) ? 1 : 0 };
    const leaked = Object.entries(left).filter(([, n]) => n > 0);
    if (leaked.length === 0) return rmSync(dir, { recursive: true, force: true });
    await purgeNetwork(tag);
    throw new Error(`cubed ${nodeID} (tag ${tag}) left kernel objects behind: ${leaked.map(([k, n]) => `${k}=${n}`).join(', ')} (log: ${logPath})`);
  };

  // A daemon that never answered is swept like a stopped one: the caller gets why it failed, and
  // nothing of it stays on the host (its dir too, unless it left a kernel object: then its log).
  let child = await launch().catch(async (e: unknown) => {
    await sweep(recordedTag()).catch((leak: unknown) => {
      throw new Error(`${(e as Error).message}\n${(leak as Error).message}`, { cause: e });
    });
    throw e;
  });
  const tag = recordedTag();
  let stopped = false;
  const d: TestDaemon = {
    url,
    apiKey,
    nodeID,
    tag,
    dataDir,
    configDir,
    pid: child.pid!,
    async stop({ destroy = true } = {}) {
      if (stopped) return;
      if (!destroy) return term(child);
      stopped = true;
      try {
        // A live daemon destroys what it holds as it stops (SIGUSR2); one already gone (kill -9)
        // is started once more to re-adopt and destroy it (2.8 s a stop at load 3: a start and a stop).
        if (child.exitCode === null && child.signalCode === null) await term(child, 'SIGUSR2');
        else await term(await launch(['--destroy-on-exit']));
      } finally {
        await sweep(tag);
      }
    },
    async kill9() {
      child.kill('SIGKILL');
      await exited(child);
    },
    async restart() {
      await term(child);
      child = await launch();
      d.pid = child.pid!;
    },
  };
  return d;
}

export interface AdminAnswer {
  status: number;
  headers: Headers;
  /** The raw body (NDJSON for exec). */
  text: string;
  /** The parsed body when it is application/json. */
  json: any;
}

/** One HTTP call to the daemon with its API key (or the given headers instead). */
export async function call(
  d: Pick<TestDaemon, 'url' | 'apiKey'>,
  method: string,
  path: string,
  body?: unknown,
  headers: Record<string, string> = { 'x-api-key': d.apiKey },
): Promise<AdminAnswer> {
  const r = await fetch(`${d.url}${path}`, {
    method,
    headers: { ...headers, ...(body !== undefined ? { 'content-type': 'application/json' } : {}) },
    ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
  });
  const text = await r.text();
  return { status: r.status, headers: r.headers, text, json: r.headers.get('content-type') === 'application/json' ? JSON.parse(text) : undefined };
}

/** Runs argv through POST /admin/v1/sandboxes/:id/exec and decodes the NDJSON stream. */
export async function adminExec(d: Pick<TestDaemon, 'url' | 'apiKey'>, sandboxID: string, argv: string[]) {
  const r = await call(d, 'POST', `/admin/v1/sandboxes/${sandboxID}/exec`, { argv });
  if (r.status !== 200) throw new Error(`exec ${sandboxID}: ${r.status} ${r.text}`);
  const lines = r.text
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as { type: string; data?: string; exitCode?: number });
  const out = (t: string) =>
    lines
      .filter((l) => l.type === t)
      .map((l) => Buffer.from(l.data!, 'base64').toString())
      .join('');
  return { contentType: r.headers.get('content-type'), lines, stdout: out('stdout'), stderr: out('stderr'), end: lines.at(-1)! };
}
