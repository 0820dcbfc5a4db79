// startCluster: a real cluster on this machine. Each compute node runs in its own "test host"
// (network namespace cubeth-<t>-<i> joined to the root namespace by a veth pair cubeth<t><i>,
// private addresses 10.<o>.<i>.1 (root side) / .2 (host side) from a test-only /16); control
// replicas listen on the root side of host 1, which every host reaches through its default
// route. Redis and MariaDB are the machine's, under a unique key prefix and database.
//
//   const c = await startCluster({ computes: 3, controls: 2 });
//   try { ... c.api(0, '/admin/v1/nodes') ... } finally { await c.stop() }
//
// stop() ends every process (computes with --destroy-on-exit), removes the test hosts, checks
// each node's kernel objects are gone, drops the Redis keys and the database.
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { createWriteStream, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { execa } from 'execa';
import { stringify as toToml } from 'smol-toml';
import { stringify as toYaml } from 'yaml';
import type { NodeView, SandboxView } from '../../src/api/types.js';
import { nodeTag } from '../../src/ids.js';
import { clusterStateScope, type ClusterStateScope } from './cluster-state.js';
import { exited, freePort, merge, settledKernelObjects, waitHealthy, type Tree } from './daemon.js';
import { TEST_HOST_ID_RANGES, purgeNetwork, testCidr, testHostIdBase, uniqueNodeID } from './kernel.js';

const ROOT = resolve(import.meta.dirname, '../..');
const BIN = join(ROOT, 'bin/cubed');
const NODE_PORT = 7000;

export interface ClusterOptions {
  computes: number;
  controls: number;
  /** Deep-merged into every cubemaster.yaml. */
  master?: Tree;
  /** Deep-merged into every compute node's cubelet.toml; a function gets the address the control replicas listen on (the root side of test host 1, which every test host reaches). */
  cubelet?: Tree | ((rootHost: string) => Tree);
  /** Data dir of compute i (e.g. a loop mount) instead of one under the cluster's dir. */
  dataDirs?: Record<number, string>;
  /** One more compute process, in the root namespace, standing for `nodes` SIMULATED nodes (--runtime sim). */
  sim?: { nodes: number; prefix: string };
  /** Where the replicas keep their state (a benchmark's own Redis and MariaDB, own-stores.ts); default: a scope of the machine's. */
  state?: ClusterStateScope;
}

export interface ClusterProcess {
  /** Base URL: the API of a control replica, the node RPC of a compute node. */
  url: string;
  readonly pid: number;
  kill9(): Promise<void>;
  /** Starts it again with the same flags (after kill9). */
  start(): Promise<void>;
  alive(): boolean;
}

export interface ComputeNode extends ClusterProcess {
  nodeID: string;
  tag: string;
  /** `path` as the node's process sees it: its store (the template layers in it) is mounted in the mount namespace `ip netns exec` gave it, not the test's. */
  seen(path: string): string;
}

export interface TestCluster {
  apiKey: string;
  secret: string;
  /** Where the replicas keep their state (its Redis key prefix and MySQL database), for tests that act as a replica. */
  state: { redisURL: string; keyPrefix: string; mysqlURL: string };
  controls: ClusterProcess[];
  computes: ComputeNode[];
  /** The process standing for the simulated nodes (ClusterOptions.sim). */
  sim?: ClusterProcess;
  /** Calls the API of control replica `i` with the key; JSON body in and out. */
  api<T = unknown>(i: number, path: string, init?: { method?: string; body?: unknown }): Promise<{ status: number; body: T }>;
  /** GET /admin/v1/nodes on replica `i`. */
  nodes(i: number): Promise<NodeView[]>;
  /** GET /admin/v1/sandboxes on replica `i`. */
  sandboxes(i: number): Promise<SandboxView[]>;
  /** POST /admin/v1/sandboxes on replica `i`: template host, 600 s, `body` over that. */
  create(i: number, body?: Record<string, unknown>): Promise<{ status: number; body: SandboxView & { code?: number; message?: string } }>;
  stop(): Promise<void>;
}

const sh = (cmd: string, args: string[]) => execa(cmd, args, { reject: false });

/**
 * `ip netns exec` mounts the namespace's own /sys, which hides the machine's cgroup
 * hierarchies: the command mounts them again (same hierarchies, same paths) before exec.
 */
function cgroupRemounts(): string {
  const lines = readFileSync('/proc/self/mounts', 'utf8')
    .split('\n')
    .map((l) => l.split(' '));
  const mounts = lines.filter((f) => f[1]?.startsWith('/sys/fs/cgroup/') && (f[2] === 'cgroup' || f[2] === 'cgroup2'));
  return [
    'mount -t tmpfs cube-cgroup /sys/fs/cgroup',
    ...mounts.map(([, dir, type, opts]) => `mkdir -p ${dir} && mount -t ${type} -o ${opts} ${type} ${dir}`),
  ].join(' && ');
}

export async function startCluster(o: ClusterOptions): Promise<TestCluster> {
  const dir = mkdtempSync('/tmp/cubed-test-cluster-');
  const scope = o.state ?? clusterStateScope();
  const apiKey = `e2b_${randomBytes(20).toString('hex')}`;
  const secret = randomBytes(16).toString('hex');
  const t = randomBytes(2).toString('hex');
  const octet = testCidr().split('.')[1]!;
  const hostNs = (i: number) => `cubeth-${t}-${i}`;
  const rootIP = (i: number) => `10.${octet}.${i}.1`;
  const hostIP = (i: number) => `10.${octet}.${i}.2`;
  const env = { ...process.env, CUBE_API_KEY: apiKey, CUBE_CLUSTER_SECRET: secret, CUBE_LOG_LEVEL: 'info' };
  const procs: { proc: ClusterProcess; child: () => ChildProcess | undefined }[] = [];
  const computes: ComputeNode[] = [];
  const controls: ClusterProcess[] = [];
  const master = merge(
    {
      api: { rate_limit_per_sec: 10_000 },
      scheduler: {
        node_max_mem_reserved_in_mb: 1024,
        filter: { enable_filters: ['mem', 'disk', 'disk_quota', 'realtime_create_num', 'template_locality', 'mvm_num'] },
      },
      sandbox: { default_spec: { cpus: 1, memory_mib: 256, disk_gib: 1 } },
    },
    o.master,
  );

  function proc(name: string, url: string, argv: () => string[]): { proc: ClusterProcess; child: () => ChildProcess | undefined } {
    const logPath = join(dir, `${name}.log`);
    let child: ChildProcess | undefined;
    const p: ClusterProcess = {
      url,
      get pid() {
        return child?.pid ?? 0;
      },
      alive: () => child !== undefined && child.exitCode === null && child.signalCode === null,
      async start() {
        const log = createWriteStream(logPath, { flags: 'a' });
        const [cmd, ...args] = argv();
        child = spawn(cmd!, args, { env, stdio: ['ignore', 'pipe', 'pipe'] });
        child.stdout!.pipe(log, { end: false });
        child.stderr!.pipe(log, { end: false });
        child.once('exit', () => log.end());
        await waitHealthy(url, child, logPath, 90_000);
      },
      async kill9() {
        if (!child || !p.alive()) return;
        child.kill('SIGKILL');
        await exited(child);
      },
    };
    const entry = { proc: p, child: () => child };
    procs.push(entry);
    return entry;
  }

  const stopAll = async () => {
    await Promise.all(
      procs.map(async ({ proc: p, child }) => {
        const c = child();
        if (!c || !p.alive()) return;
        c.kill('SIGTERM');
        const k = setTimeout(() => c.kill('SIGKILL'), 60_000);
        await exited(c);
        clearTimeout(k);
      }),
    );
  };

  const cluster: TestCluster = {
    apiKey,
    secret,
    state: { redisURL: scope.redisURL, keyPrefix: scope.keyPrefix, mysqlURL: scope.mysqlURL },
    controls,
    computes,
    async api<T>(i: number, path: string, init: { method?: string; body?: unknown } = {}) {
      const res = await fetch(controls[i]!.url + path, {
        method: init.method ?? (init.body !== undefined ? 'POST' : 'GET'),
        headers: { 'x-api-key': apiKey, ...(init.body !== undefined ? { 'content-type': 'application/json' } : {}) },
        ...(init.body !== undefined ? { body: JSON.stringify(init.body) } : {}),
      });
      const text = await res.text();
      return { status: res.status, body: (text ? JSON.parse(text) : undefined) as T };
    },
    async nodes(i) {
      return (await cluster.api<NodeView[]>(i, '/admin/v1/nodes')).body;
    },
    async sandboxes(i) {
      return (await cluster.api<SandboxView[]>(i, '/admin/v1/sandboxes')).body;
    },
    create(i, body = {}) {
      return cluster.api(i, '/admin/v1/sandboxes', { body: { templateID: 'host', timeoutSec: 600, ...body } });
    },
    async stop() {
      const problems: string[] = [];
      try {
        // Nodes killed with -9 come back once with --destroy-on-exit so their sandboxes go too.
        for (const c of computes)
          if (!c.alive()) await c.start().catch((e: unknown) => problems.push(`restart ${c.nodeID} for clean-up: ${(e as Error).message}`));
        await stopAll();
      } finally {
        for (const c of computes) {
          const left = await settledKernelObjects(c.tag);
          const leaked = Object.entries(left).filter(([, n]) => n > 0);
          if (leaked.length > 0) problems.push(`${c.nodeID}: ${leaked.map(([k, n]) => `${k}=${n}`).join(', ')}`);
          await purgeNetwork(c.tag);
        }
        for (let i = 1; i <= o.computes; i++) {
          await sh('ip', ['netns', 'del', hostNs(i)]);
          await sh('ip', ['link', 'del', `cubeth${t}${i}`]);
        }
        await scope.drop();
        // CUBE_KEEP_CLUSTER_LOGS=1: kept after a clean stop too (a chaos run's findings are read in them).
        if (problems.length === 0 && !process.env.CUBE_KEEP_CLUSTER_LOGS) rmSync(dir, { recursive: true, force: true });
        else if (problems.length === 0) console.error(`cluster logs kept in ${dir}`);
      }
      if (problems.length > 0) throw new Error(`cluster clean-up (logs in ${dir}): ${problems.join('; ')}`);
    },
  };

  try {
    // Test hosts.
    for (let i = 1; i <= o.computes; i++) {
      const ns = hostNs(i);
      const veth = `cubeth${t}${i}`;
      const script = [
        `netns add ${ns}`,
        `link add ${veth} type veth peer name eth0 netns ${ns}`,
        `addr add ${rootIP(i)}/24 dev ${veth}`,
        `link set ${veth} up`,
        `-n ${ns} link set lo up`,
        `-n ${ns} addr add ${hostIP(i)}/24 dev eth0`,
        `-n ${ns} link set eth0 up`,
        `-n ${ns} route add default via ${rootIP(i)}`,
      ];
      for (const line of script) {
        const r = await sh('ip', line.split(' '));
        if (r.exitCode !== 0) throw new Error(`ip ${line}: ${r.stderr}`);
      }
    }
    const controlURLs: string[] = [];
    // Without test hosts (simulated nodes only) everything listens on loopback.
    const rootHost = o.computes > 0 ? rootIP(1) : '127.0.0.1';
    const masterDir = join(dir, 'control-config');
    mkdirSync(masterDir);
    writeFileSync(join(masterDir, 'cubemaster.yaml'), toYaml(master));
    writeFileSync(join(masterDir, 'cubelet.toml'), '');
    for (let j = 0; j < o.controls; j++) {
      const port = await freePort();
      const url = `http://${rootHost}:${port}`;
      controlURLs.push(url);
      const p = proc(`control-${j}`, url, () => [
        process.execPath,
        BIN,
        '--role',
        'control',
        '--redis',
        scope.redisURL,
        '--redis-prefix',
        scope.keyPrefix,
        '--mysql',
        scope.mysqlURL,
        '--config-dir',
        masterDir,
        '--listen',
        `${rootHost}:${port}`,
        '--node-id',
        `control-${j}`,
      ]);
      controls.push(p.proc);
    }
    // One replica first: it runs the migrations the others then find done.
    await controls[0]!.start();
    await Promise.all(controls.slice(1).map((c) => c.start()));
    const remounts = cgroupRemounts();
    for (let i = 1; i <= o.computes; i++) {
      const nodeID = uniqueNodeID(`cl${i}`);
      const cfgDir = join(dir, `compute-${i}-config`);
      const dataDir = o.dataDirs?.[i] ?? join(dir, `compute-${i}-data`);
      mkdirSync(cfgDir);
      mkdirSync(dataDir, { recursive: true });
      writeFileSync(join(cfgDir, 'cubemaster.yaml'), toYaml(master));
      writeFileSync(
        join(cfgDir, 'cubelet.toml'),
        toToml(
          merge(
            {
              quota: { cpus: 16, memory_mib: 65_536 },
              identity: { host_id_base: testHostIdBase(), host_id_ranges: TEST_HOST_ID_RANGES },
              plugins: { 'io.cubelet.internal.v1.network': { tap_init_num: 4, cidr: testCidr() } },
            },
            typeof o.cubelet === 'function' ? o.cubelet(rootHost) : o.cubelet,
          ),
        ),
      );
      const url = `http://${hostIP(i)}:${NODE_PORT}`;
      const argv = [
        process.execPath,
        BIN,
        '--role',
        'compute',
        '--control',
        controlURLs.join(','),
        '--node-id',
        nodeID,
        '--listen',
        `${hostIP(i)}:${NODE_PORT}`,
        '--data-dir',
        dataDir,
        '--config-dir',
        cfgDir,
        '--destroy-on-exit',
      ];
      const p = proc(`compute-${i}`, url, () => ['ip', 'netns', 'exec', hostNs(i), 'sh', '-c', `${remounts} && exec ${argv.join(' ')}`]);
      computes.push(Object.assign(p.proc, { nodeID, tag: nodeTag(nodeID), seen: (path: string) => `/proc/${p.proc.pid}/root${path}` }));
    }
    await Promise.all(computes.map((c) => c.start()));
    if (o.sim) {
      const cfgDir = join(dir, 'sim-config');
      mkdirSync(cfgDir);
      writeFileSync(join(cfgDir, 'cubemaster.yaml'), toYaml(master));
      writeFileSync(join(cfgDir, 'cubelet.toml'), '');
      const port = await freePort();
      const p = proc('sim', `http://${rootHost}:${port}`, () => [
        process.execPath,
        BIN,
        '--role',
        'compute',
        '--runtime',
        'sim',
        '--sim-nodes',
        String(o.sim!.nodes),
        '--node-id-prefix',
        o.sim!.prefix,
        '--node-id',
        uniqueNodeID('sim'),
        '--control',
        controlURLs.join(','),
        '--listen',
        `${rootHost}:${port}`,
        '--data-dir',
        join(dir, 'sim-data'),
        '--config-dir',
        cfgDir,
        '--destroy-on-exit',
      ]);
      cluster.sim = p.proc;
      await p.proc.start();
    }
    return cluster;
  } catch (e) {
    const logs = procs
      .map((_, k) => k)
      .flatMap((k) => {
        const name = k < o.controls ? `control-${k}` : k < o.controls + o.computes ? `compute-${k - o.controls + 1}` : 'sim';
        try {
          return [
            `${name}: ${readFileSync(join(dir, `${name}.log`), 'utf8')
              .trim()
              .split('\n')
              .slice(-3)
              .join('\n')}`,
          ];
        } catch {
          return [];
        }
      });
    await cluster.stop().catch(() => undefined);
    throw new Error(`startCluster: ${(e as Error).message}\n${logs.join('\n')}`);
  }
}

/** Runs `n` calls of `fn` with at most `width` at once. */
export async function burst<T>(n: number, width: number, fn: (k: number) => Promise<T>): Promise<T[]> {
  const out: T[] = [];
  let next = 0;
  await Promise.all(
    Array.from({ length: width }, async () => {
      for (let k = next++; k < n; k = next++) out[k] = await fn(k);
    }),
  );
  return out;
}

/** Polls `probe` until it returns a value (not undefined) or the time is up. */
export async function until<T>(what: string, probe: () => Promise<T | undefined>, timeoutMs = 20_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await probe().catch(() => undefined);
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}
