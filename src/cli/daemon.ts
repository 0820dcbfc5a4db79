// cubed: the daemon. Role all runs the API, the local placement step, the cubelet and the
// network-agent in one process with embedded state. See `cubed --help`.
import { closeSync, ftruncateSync, mkdirSync, readFileSync, rmSync, writeFileSync, writeSync } from 'node:fs';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { hostname } from 'node:os';
import { join, resolve } from 'node:path';
import type { Duplex } from 'node:stream';
import { Command, Option } from 'commander';
import pino, { type Logger } from 'pino';
import { sendError, sendJson } from '../http.js';
import { resolveConfigDir, packageRoot } from '../config/loader.js';
import { ConfigStore } from '../config/store.js';
import type { Config, MasterConfig } from '../config/schema.js';
import type { ConfigOverride } from '../api/types.js';
import type { Cubelet } from '../cubelet/cubelet.js';
import type { HeartbeatMember } from '../cubelet/heartbeat.js';
import { clusterSecret } from '../cubelet/rpc-wire.js';
import { CubeError, isCubeError } from '../errors.js';
import { nodeTag } from '../ids.js';
import { ID_RANGE } from '../runtime/ns/ids.js';
import { HostTaken, claimHost, dataDirTag, lockFile } from '../cubelet/host-claims.js';
import type { NsDriverOptions } from '../runtime/ns/driver.js';
import type { RuntimeDriver } from '../runtime/types.js';
import type { TemplateBuilder } from '../templates/build/build.js';
import type { TemplateStore } from '../templates/store.js';
import type { FetchingCatalog } from '../templates/fetch.js';

interface Flags {
  role: 'all' | 'control' | 'compute';
  listen?: string;
  dataDir?: string;
  configDir?: string;
  apiKey?: string;
  nodeId?: string;
  destroyOnExit?: boolean;
  redis?: string;
  mysql?: string;
  redisPrefix?: string;
  control?: string;
  advertise?: string;
  sandboxDomain?: string;
  runtime?: 'ns' | 'microvm' | 'sim';
  simNodes?: string;
  nodeIdPrefix?: string;
}

const HELP_AFTER = `
Roles:
  all       (default) API + placement + cubelet + network-agent in one process; state in
            SQLite at <data-dir>/cubed.db.
  control   API + scheduler, state in Redis (--redis) + MySQL (--mysql); holds no state of its
            own, so several replicas may run and any serves any request. Needs the API key
            from --api-key or $CUBE_API_KEY (the same on every replica).
  compute   cubelet + network-agent; serves node RPC on --listen and heartbeats every second
            to --control (comma-separated replicas, tried in turn). Several may share a host
            with distinct --data-dir, --node-id, --listen and pool cidr.
  Node <-> control traffic carries $CUBE_CLUSTER_SECRET (default: the API key).

Simulation (benchmarks and tests only, never the default):
  --runtime sim      sandboxes are in-memory records: no process, namespace, cgroup, mount or
                     netns is made; exec simulates a few commands (true, echo, cat, sleep, ...)
                     and answers 127 to the rest; nothing survives a restart.
  --sim-nodes N      (compute, with --runtime sim) this one process stands for N nodes named
                     <--node-id-prefix>0000.. with varied capacity, each serving its node RPC
                     under /sim/<nodeID> of --listen; their heartbeats go in one request.

Configuration:
  <config-dir>/cubemaster.yaml and <config-dir>/cubelet.toml (docs/configuration.md). The
  config dir is --config-dir, else /etc/cubed when it exists, else the package's config/.
  Files are watched: a valid edit applies live, an invalid one is refused and the old config
  stays (see the config.rejected event). Flags override: --listen (api.listen), --data-dir
  (data_dir), --node-id (node_id).

API key:
  --api-key, else $CUBE_API_KEY, else the key in <data-dir>/api-key, generated on the first
  start (e2b_<40 hex>, mode 0600). Clients send it as X-API-Key or Authorization: Bearer.

Data dir (default /var/lib/cubed):
  cubed.db (records, events, audit), api-key, sandboxes/<id>/ (overlay upper dirs and
  meta.json), templates/, microvm/ (microVM disks, sockets, template images, memory
  snapshots), node-tag (the tag naming its kernel objects). One daemon per data dir
  (cubed.pid, locked), per node id and per tag; claims live in /run/cube (one file per
  daemon, locked while it runs).

Signals:
  SIGTERM, SIGINT   graceful stop: the API closes, sandboxes keep running and are re-adopted
                    at the next start (anything half-created is cleaned then). With
                    --destroy-on-exit every sandbox and the network pool are destroyed and the
                    host's netns, links, cgroups, mounts and nftables are as before the start.
                    A second signal exits at once.
  SIGUSR2           the same stop, destroying as --destroy-on-exit does (a node taken out of
                    service without a restart of its flags; the test suite's stop).

Logs:
  JSON lines (pino) on stdout; level from $CUBE_LOG_LEVEL (default info).

Exit status:
  0 stopped by a signal; 1 start-up failed (reason on stderr and in the log);
  2 bad usage or invalid configuration; 3 the host is taken: another live cubed holds
  this data dir, node id, node tag, an overlapping pool cidr (in this network namespace) or
  overlapping sandbox host ids, or the pool cidr meets a route or address of the host
  (retrying does not help: systemd's RestartPreventExitStatus=3).

Examples:
  cubed                                       # role all on 127.0.0.1:3000
  cubed --listen 0.0.0.0:3000 --data-dir /srv/cubed
  CUBE_API_KEY=secret cubed --destroy-on-exit
  CUBE_API_KEY=k cubed --role control --redis redis://127.0.0.1:6379/0 --mysql mysql://root@127.0.0.1:3306/cube
  CUBE_API_KEY=k cubed --role compute --control http://10.0.0.1:3000 --node-id n1 --listen 10.0.0.2:7000
`;

function version(): string {
  return (JSON.parse(readFileSync(join(packageRoot(), 'package.json'), 'utf8')) as { version: string }).version;
}

function parseListen(s: string): { host: string; port: number } {
  const m = /^(?:\[([^\]]+)\]|([^:]*)):(\d{1,5})$/.exec(s);
  const port = Number(m?.[3]);
  if (!m || !(port >= 0 && port <= 65535)) throw new UsageError(`--listen ${s}: expected ADDR:PORT such as 127.0.0.1:3000`);
  return { host: m[1] ?? (m[2] || '0.0.0.0'), port };
}

class UsageError extends Error {}

/**
 * One daemon per data dir: a second one would fight over the same kernel objects. The pid file
 * is flock'd for the daemon's life (the kernel unlocks it when the process dies), where a pid
 * read back and looked up in /proc raced with a second start and with pid reuse.
 */
function takePidLock(dataDir: string): () => void {
  const path = join(dataDir, 'cubed.pid');
  const fd = lockFile(path);
  if (fd === undefined) {
    const other = readFileSync(path, 'utf8').trim();
    throw new HostTaken(`another cubed (pid ${other || '?'}) is running with data dir ${dataDir}`);
  }
  ftruncateSync(fd, 0);
  writeSync(fd, `${process.pid}\n`);
  return () => {
    rmSync(path, { force: true });
    closeSync(fd);
  };
}

/** The master config in force with --sandbox-domain laid over it (rebuilt only when the config changes). */
function apiConfig(config: ConfigStore, flags: Flags): () => MasterConfig {
  const domain = flags.sandboxDomain;
  if (domain === undefined) return () => config.config.master;
  let base: MasterConfig | undefined;
  let merged: MasterConfig | undefined;
  return () => {
    const m = config.config.master;
    if (m !== base || !merged) {
      base = m;
      merged = { ...m, api: { ...m.api, sandbox_domain: domain } };
    }
    return merged;
  };
}

/**
 * What the daemon runs with where the files say otherwise (ConfigView.overrides): its flags, the
 * address it listens on (port 0 in the file picks one) and the host name standing for an empty
 * node_id. The console's config view showed the file's `api.listen 127.0.0.1:3000` for a daemon
 * started with --listen elsewhere.
 */
function overridesOf(
  flags: Flags,
  cfg: Readonly<Config>,
  found: { listen: { address: string; port: number }; nodeID?: string; dataDir?: string },
): ConfigOverride[] {
  const out: ConfigOverride[] = [];
  // A flag always counts; what the daemon found only when it differs from the file.
  const add = (path: string, value: unknown, inFile: unknown, flag: string | undefined, found?: string) => {
    if (flag) out.push({ path, value, from: flag });
    else if (found && JSON.stringify(value) !== JSON.stringify(inFile)) out.push({ path, value, from: found });
  };
  const { address, port } = found.listen;
  add('master.api.listen', `${address.includes(':') ? `[${address}]` : address}:${port}`, cfg.master.api.listen, flags.listen && '--listen', 'listening');
  add('master.api.sandbox_domain', flags.sandboxDomain, cfg.master.api.sandbox_domain, flags.sandboxDomain && '--sandbox-domain');
  if (found.nodeID !== undefined) add('cubelet.node_id', found.nodeID, cfg.cubelet.node_id, flags.nodeId && '--node-id', 'host name');
  if (found.dataDir !== undefined) add('cubelet.data_dir', found.dataDir, cfg.cubelet.data_dir, flags.dataDir && '--data-dir', 'resolved');
  add('cubelet.runtime', flags.runtime, cfg.cubelet.runtime, flags.runtime && '--runtime');
  return out;
}

/** Config, identity, data dir (locked: one daemon per data dir) and logger of roles all and compute. */
function openNode(flags: Flags) {
  const configDir = resolveConfigDir(flags.configDir);
  const config = new ConfigStore(configDir);
  const cfg = config.config;
  const nodeID = flags.nodeId ?? (cfg.cubelet.node_id || hostname());
  const dataDir = resolve(flags.dataDir ?? cfg.cubelet.data_dir);
  const listen = parseListen(flags.listen ?? cfg.master.api.listen);
  mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  const log: Logger = pino({ level: process.env.CUBE_LOG_LEVEL ?? 'info', base: { nodeID } });
  const unlock = takePidLock(dataDir);
  protectFromOomKiller(log);
  return { configDir, config, nodeID, dataDir, listen, log, unlock };
}

/**
 * The node's agent is the last thing the host's OOM killer should take: -900 for cubed (and the
 * launch helper it starts), while every sandbox process runs at +500 (cube-launch).
 */
const DAEMON_OOM_SCORE_ADJ = -900;
function protectFromOomKiller(log: Logger): void {
  try {
    writeFileSync('/proc/self/oom_score_adj', `${DAEMON_OOM_SCORE_ADJ}\n`);
  } catch (err) {
    // Without CAP_SYS_RESOURCE (some containers) it stays at 0: still below the sandboxes' +500.
    log.warn({ err }, "could not lower the daemon's oom_score_adj below 0 (no CAP_SYS_RESOURCE): sandboxes (+500) still go first");
  }
}

type Runtimes = 'sim' | ('ns' | 'microvm')[];

/** The runtimes in force: --runtime, else cubelet.runtime (one, or the list a node offers; the first is the default). */
function runtimeOf(m: NodeModules, flags: Flags, config: ConfigStore): Runtimes {
  const r = flags.runtime ?? config.config.cubelet.runtime;
  if (r === 'sim') return r;
  const list = [...new Set(typeof r === 'string' ? [r] : r)];
  if (list.includes('microvm')) {
    const missing = m.microvmArtifacts().missing;
    if (missing) throw new UsageError(`runtime microvm: ${missing}`);
  }
  return list;
}

/**
 * The node agent of roles all and compute: cubelet + network-agent + runtime on `dataDir`.
 * `api` is what the node serves (the cubelet itself, or with simulated usage on a sim node).
 */
function buildCubelet(
  m: NodeModules,
  nodeID: string,
  tag: string,
  dataDir: string,
  config: ConfigStore,
  log: Logger,
  runtime: Runtimes,
  templates = new m.TemplateStore(dataDir),
  catalog?: FetchingCatalog,
): { cubelet: Cubelet; api: Cubelet; builds?: TemplateBuilder } {
  const { simNode, NsNetworkAgent, policySettingsOf, Cubelet, parseRange, TemplateBuilder } = m;
  if (runtime === 'sim') return simNode({ nodeID, dataDir, config: () => config.config, log: log.child({ component: 'cubelet', runtime: 'sim' }) });
  const net = config.config.cubelet.plugins['io.cubelet.internal.v1.network'];
  let cubelet: Cubelet | undefined;
  const network = new NsNetworkAgent({
    nodeTag: tag,
    cidr: net.cidr,
    // Each mode's pool is kept warm on a node offering its runtime only.
    initNum: runtime.includes('ns') ? net.tap_init_num : 0,
    tapInitNum: runtime.includes('microvm') ? net.microvm_tap_init_num : 0,
    policy: policySettingsOf(net),
    log,
    onNotice: (n) => cubelet?.report(n.kind, n.message),
  });
  // The policy knobs are live: a reload replaces the node's nftables table (sandboxes' own rules kept).
  let applied = JSON.stringify(policySettingsOf(net));
  config.on('change', ({ current }) => {
    const want = policySettingsOf(current.config.cubelet.plugins['io.cubelet.internal.v1.network']);
    if (JSON.stringify(want) === applied) return;
    applied = JSON.stringify(want);
    network.setPolicy(want).then(
      () => log.info({ policy: want }, 'network policy updated'),
      (err: unknown) => log.error({ err }, 'network policy update failed: the previous table stays in force'),
    );
  });
  const driver = runtimeDriver(m, runtime, {
    dataDir,
    nodeTag: tag,
    log,
    bootTimeoutMs: config.config.cubelet.microvm.boot_timeout_sec * 1000,
    snapshots: config.config.cubelet.microvm.snapshots,
    consoleLogBytes: config.config.cubelet.microvm.console_log_kib * 1024,
    storeImageGiB: config.config.cubelet.storage.image_gib,
    identity: identityOf(config.config.cubelet.identity),
    ...(config.config.cubelet.quota?.memory_mib ? { declaredMemoryMiB: config.config.cubelet.quota.memory_mib } : {}),
  });
  cubelet = new Cubelet({
    nodeID,
    dataDir,
    driver,
    network,
    templates: catalog ?? templates,
    config: () => config.config,
    log: log.child({ component: 'cubelet' }),
    poolSlotLimit: parseRange(net.cidr).maxIndex,
  });
  if (catalog) catalog.onEvent = (kind, message, extra) => cubelet.report(kind, message, extra);
  // Build steps run on the ns runtime (their writable layer becomes a template layer).
  // A cluster compute node fetches a build's base template it lacks, as a create does.
  const builds = runtime.includes('ns')
    ? new TemplateBuilder({
        dataDir,
        templates,
        driver,
        network,
        config: () => config.config,
        log: log.child({ component: 'template-build' }),
        ...(catalog ? { fetchTemplate: (name: string) => catalog.resolve(name) } : {}),
      })
    : undefined;
  return { cubelet, api: cubelet, ...(builds ? { builds } : {}) };
}

/** The template store at start: scratch left by a crash cleared, layers no template holds removed. */
async function startStore(m: NodeModules, templates: TemplateStore, log: Logger): Promise<void> {
  await m.cleanScratch(templates.dataDir);
  const removed = await templates.collectGarbage();
  if (removed.length) log.info({ layers: removed }, `removed ${removed.length} layer(s) no template holds`);
}

/** One driver, or a RuntimeSet when the node offers several. */
function runtimeDriver(
  m: NodeModules,
  runtimes: ('ns' | 'microvm')[],
  o: {
    dataDir: string;
    nodeTag: string;
    log: Logger;
    bootTimeoutMs: number;
    snapshots: boolean;
    consoleLogBytes: number;
    storeImageGiB: number;
    identity: NonNullable<NsDriverOptions['identity']>;
    declaredMemoryMiB?: number;
  },
): RuntimeDriver {
  const { NsDriver, MicrovmDriver, readMeminfo, RuntimeSet } = m;
  const { declaredMemoryMiB, snapshots, consoleLogBytes, identity, ...common } = o;
  // The ns driver limits its sandboxes together at the declared quota only (none declared: no
  // limit of ours); a microVM is refused when it cannot fit the node (declared, else MemTotal).
  const ns = runtimes.includes('ns') ? new NsDriver({ ...common, identity, ...(declaredMemoryMiB ? { nodeMemoryMiB: declaredMemoryMiB } : {}) }) : undefined;
  // A node offering both keeps one store: the ns driver opens it, microVM disks live in it too;
  // and one set of host id ranges, so no QEMU runs with an ns sandbox's ids.
  const ids = ns?.ids ? { ids: ns.ids } : {};
  const drivers = runtimes.map((r) =>
    r === 'ns'
      ? ns!
      : new MicrovmDriver({
          ...common,
          snapshots,
          consoleLogBytes,
          identity,
          ...ids,
          nodeMemoryMiB: declaredMemoryMiB ?? readMeminfo().totalMiB,
          ...(declaredMemoryMiB ? { declaredMemoryMiB } : {}),
          ...(ns ? { storage: ns.storage } : {}),
        }),
  );
  return drivers.length === 1 && drivers[0]!.name === 'ns' ? drivers[0]! : new RuntimeSet(drivers);
}

/** cubelet identity.* as the ns driver's option. */
function identityOf(c: { userns: boolean; host_id_base: number; host_id_ranges: number }): NonNullable<NsDriverOptions['identity']> {
  return { userns: c.userns, hostIdBase: c.host_id_base, hostIdRanges: c.host_id_ranges };
}

/**
 * The node's claim on the host (src/cubelet/host-claims.ts): its node id, tag, pool CIDR and
 * sandbox host ids, refused with HostTaken (exit 3) when a live daemon holds one or the CIDR meets
 * a route of the host. A simulated node makes no kernel object and claims nothing.
 */
function claimNode(nodeID: string, dataDir: string, config: ConfigStore, runtime: Runtimes): { tag: string; release: () => void } {
  if (runtime === 'sim') return { tag: nodeTag(nodeID), release: () => {} };
  const tag = dataDirTag(dataDir, nodeID);
  const id = config.config.cubelet.identity;
  const hostIds: [number, number] = [id.host_id_base, id.host_id_base + id.host_id_ranges * ID_RANGE - 1];
  const { release } = claimHost({
    nodeID,
    tag,
    dataDir,
    cidr: config.config.cubelet.plugins['io.cubelet.internal.v1.network'].cidr,
    ...(runtime.includes('ns') && id.userns ? { hostIds } : {}),
  });
  return { tag, release };
}

/** What became of the startup key (KeyBook.bootstrap), in the log. */
function logBootstrap(log: Logger, outcome: 'migrated' | 'present' | 'not-a-key', from: string): void {
  if (outcome === 'migrated') log.info({ from }, 'API key recorded as the first admin key ("admin"); cubectl key create makes more');
  else if (outcome === 'not-a-key')
    log.warn({ from }, 'the startup API key is not one of the stored API keys (it was removed): clients using it get 401; cubectl key ls lists the keys');
}

/** SIGTERM/SIGINT/SIGUSR2 run `stop` once (exit 0, or 1 when it fails); a second signal exits at once. */
function onSignals(log: Logger, stop: (signal: string) => Promise<void>): void {
  let stopping = false;
  const handle = async (signal: string) => {
    if (stopping) {
      log.warn({ signal }, 'second signal: exiting now');
      process.exit(1);
    }
    stopping = true;
    try {
      await stop(signal);
      log.info('stopped');
      process.exit(0);
    } catch (err) {
      log.error({ err }, 'shutdown failed');
      process.exit(1);
    }
  };
  process.on('SIGTERM', () => void handle('SIGTERM'));
  process.on('SIGINT', () => void handle('SIGINT'));
  process.on('SIGUSR2', () => void handle('SIGUSR2'));
}

async function runAll(flags: Flags): Promise<void> {
  const { configDir, config, nodeID, dataDir, listen, log, unlock } = openNode(flags);
  const [{ resolveApiKey, EmbeddedStore, ControlPlaneService, inProcessControl, createApiServer }, m] = await Promise.all([controlModules(), nodeModules()]);
  const { TemplateStore, FenceBook, HeartbeatSender } = m;
  const runtime = runtimeOf(m, flags, config);
  const { tag, release } = claimNode(nodeID, dataDir, config, runtime);
  const apiKey = resolveApiKey({
    ...(flags.apiKey ? { flag: flags.apiKey } : {}),
    ...(process.env.CUBE_API_KEY ? { env: process.env.CUBE_API_KEY } : {}),
    dataDir,
  });
  if (apiKey.from === 'generated') log.warn({ path: apiKey.path }, `generated an API key in ${apiKey.path} (mode 0600); clients send it as X-API-Key`);
  else log.info({ from: apiKey.from, path: apiKey.path }, 'API key loaded');

  const store = new EmbeddedStore({ path: join(dataDir, 'cubed.db') });
  await store.init();
  // One store for the node and the admin API (template import and rm): it caches the index.
  const templates = runtime !== 'sim' ? new TemplateStore(dataDir) : undefined;
  if (templates) await startStore(m, templates, log);
  const { cubelet, api: node, builds } = buildCubelet(m, nodeID, tag, dataDir, config, log, runtime, templates);
  await builds?.restore();
  const t0 = performance.now();
  const { adopted, removed } = await cubelet.start();
  // A cluster of one, wired in-process: the same control plane as role control, over the
  // embedded store, with this process's cubelet as its one node, heartbeating by a call.
  const fences = new FenceBook(
    dataDir,
    (await node.listSandboxes()).map((s) => s.sandboxID),
  );
  const cp = new ControlPlaneService({
    store,
    config,
    log: log.child({ component: 'control-plane' }),
    replicaID: nodeID,
    ...inProcessControl([{ node, fences }]),
  });
  await cp.start();
  logBootstrap(log, await cp.keys.bootstrap(apiKey.key), apiKey.path ?? apiKey.from);
  let settled = false;
  const heartbeat = new HeartbeatSender({
    nodes: [{ node, address: 'in-process' }],
    // The first list settles the records (the node has just started: nothing is mid-create) before the API serves.
    to: { local: (b) => cp.heartbeats(b.heartbeats, !settled).then((a) => ((settled = true), a)) },
    log: log.child({ component: 'heartbeat' }),
  });
  if (!(await heartbeat.beat())) throw new Error(`node ${nodeID} could not report to its control plane (see the log)`);
  heartbeat.start();
  const swept = await cp.snapshots.sweep(node);
  if (swept.data.length || swept.records.length) log.info({ unrecorded: swept.data, dataGone: swept.records }, 'snapshots swept at start');
  const api = createApiServer({
    ctx: {
      cp,
      log: log.child({ component: 'api' }),
      config: apiConfig(config, flags),
      ...(templates ? { templates, registryInsecure: () => config.config.cubelet.registry.insecure } : {}),
      ...(templates && builds ? { builds } : {}),
    },
    nodeID,
    version: version(),
  });
  const addr = await api.listen(listen.host, listen.port);
  config.setOverrides(overridesOf(flags, config.config, { listen: addr, nodeID, dataDir }));
  log.info(
    {
      url: `http://${addr.address.includes(':') ? `[${addr.address}]` : addr.address}:${addr.port}`,
      configDir,
      dataDir,
      tag,
      adopted: adopted.length,
      cleaned: removed.length,
      startMs: Math.round(performance.now() - t0),
    },
    'cubed ready',
  );

  onSignals(log, async (signal) => {
    const destroy = flags.destroyOnExit === true || signal === 'SIGUSR2';
    log.info({ signal, destroy }, destroy ? 'stopping: destroying every sandbox and the pool' : 'stopping: sandboxes stay for the next start');
    await api.close();
    await heartbeat.stop();
    await cp.stop();
    await cubelet.stop({ destroy });
    await builds?.flush();
    await store.close();
    config.close();
    release();
    unlock();
  });
}

/**
 * The control plane's modules (API server, stores, scheduler), loaded only by the roles that run
 * one: a compute node never uses them, and loading them was most of its start-up (importing them
 * took 3.1 s against 1.3 s for the node's own modules at load 10 on this machine; a compute node
 * became healthy in 2.0-2.7 s instead of 3.1-4.6 s at load 7-10, three runs each, back to back;
 * three nodes and a replica starting at once under the test suite's load missed a 90 s health
 * wait in test/cluster/layers.test.ts).
 */
async function controlModules() {
  const [auth, server, cp, directory, embedded] = await Promise.all([
    import('../api/auth.js'),
    import('../api/server.js'),
    import('../control/service.js'),
    import('../control/wiring.js'),
    import('../store/embedded.js'),
  ]);
  return { ...auth, ...server, ...cp, ...directory, ...embedded };
}

/** What a control replica adds (the cluster store's Redis and MySQL clients, node RPC, the layer relay): role all never loads them. */
async function clusterModules() {
  const [base, clusterRpc, relay, templates, cluster] = await Promise.all([
    controlModules(),
    import('../api/cluster-rpc.js'),
    import('../templates/relay.js'),
    import('../templates/cluster.js'),
    import('../store/cluster/index.js'),
  ]);
  return { ...base, ...clusterRpc, ...relay, ...templates, ...cluster };
}

/**
 * The node agent's modules (cubelet, runtimes, network agent, template builds), loaded only by
 * the roles that run a node, as controlModules() are by the roles that run a control plane: a
 * control replica never uses them. Without them it loads 351 module files instead of 534 and
 * uses 0.88-0.90x the CPU until healthy (median of 8 and 12 alternating runs against the
 * previous build, at load 10-12; its wall time moved with the load more than that).
 */
async function nodeModules() {
  const [
    cubelet,
    hostMetrics,
    heartbeat,
    fences,
    rpcServer,
    portProxy,
    agent,
    firewall,
    ipam,
    ns,
    microvm,
    microvmHost,
    multi,
    sim,
    layersImport,
    build,
    templates,
    layerFetch,
  ] = await Promise.all([
    import('../cubelet/cubelet.js'),
    import('../cubelet/host-metrics.js'),
    import('../cubelet/heartbeat.js'),
    import('../cubelet/fences.js'),
    import('../cubelet/rpc-server.js'),
    import('../cubelet/port-proxy.js'),
    import('../network/agent.js'),
    import('../network/firewall.js'),
    import('../network/ipam.js'),
    import('../runtime/ns/driver.js'),
    import('../runtime/microvm/driver.js'),
    import('../runtime/microvm/host.js'),
    import('../runtime/multi.js'),
    import('../cubelet/sim-nodes.js'),
    import('../templates/layers/import.js'),
    import('../templates/build/build.js'),
    import('../templates/store.js'),
    import('../templates/fetch.js'),
  ]);
  return {
    ...cubelet,
    ...hostMetrics,
    ...heartbeat,
    ...fences,
    ...rpcServer,
    ...portProxy,
    ...agent,
    ...firewall,
    ...ipam,
    ...ns,
    ...microvm,
    ...microvmHost,
    ...multi,
    ...sim,
    ...layersImport,
    ...build,
    ...templates,
    ...layerFetch,
  };
}
type NodeModules = Awaited<ReturnType<typeof nodeModules>>;

/** The cluster secret: $CUBE_CLUSTER_SECRET, else the API key; a cluster process refuses to start without one. */
function requireSecret(apiKey?: string): string {
  const secret = clusterSecret() ?? apiKey;
  if (!secret) throw new UsageError('set CUBE_CLUSTER_SECRET (or CUBE_API_KEY): node <-> control traffic is authenticated with it');
  return secret;
}

async function runControl(flags: Flags): Promise<void> {
  if (!flags.redis || !flags.mysql) throw new UsageError('--role control needs --redis redis://HOST:PORT/DB and --mysql mysql://USER@HOST:PORT/DB');
  const apiKey = flags.apiKey ?? process.env.CUBE_API_KEY;
  if (!apiKey) throw new UsageError('--role control needs the API key from --api-key or $CUBE_API_KEY (every replica must share it)');
  const secret = requireSecret(apiKey);
  const { ClusterStore, ControlPlaneService, clusterControl, LayerRelay, ClusterTemplates, createApiServer, CLUSTER_PREFIX, clusterRpcHandler } =
    await clusterModules();
  const configDir = resolveConfigDir(flags.configDir);
  const config = new ConfigStore(configDir);
  const listen = parseListen(flags.listen ?? config.config.master.api.listen);
  const replicaID = flags.nodeId ?? `control-${hostname()}-${process.pid}`;
  const log: Logger = pino({ level: process.env.CUBE_LOG_LEVEL ?? 'info', base: { replica: replicaID } });
  const store = new ClusterStore({ redisURL: flags.redis, mysqlURL: flags.mysql, ...(flags.redisPrefix ? { keyPrefix: flags.redisPrefix } : {}) });
  await store.init();
  const cp = new ControlPlaneService({
    store,
    config,
    log: log.child({ component: 'control-plane' }),
    replicaID,
    ...clusterControl(store, secret, () => config.config.master.sandbox.call_deadline_sec * 1000),
  });
  await cp.start();
  logBootstrap(log, await cp.keys.bootstrap(apiKey), flags.apiKey ? '--api-key' : '$CUBE_API_KEY');
  const relay = new LayerRelay({
    nodes: () => cp.listNodes(),
    secret,
    noteTemplates: (nodeID, templates) => cp.noteNodeTemplates(nodeID, templates),
    registryHolders: async (listed) => (await cp.templates()).find((t) => t.templateID === listed)?.nodes ?? [],
  });
  const clusterTemplates = new ClusterTemplates({
    nodes: () => cp.listNodes(),
    client: (v) => relay.node(v),
    book: store,
    secret,
    sandboxes: () => cp.listSandboxes(),
    memoryMiB: () => config.config.master.sandbox.default_spec.memory_mib,
    templatesChanged: (v) => relay.templatesChanged(v),
  });
  const api = createApiServer({
    ctx: { cp, log: log.child({ component: 'api' }), config: apiConfig(config, flags), relay, clusterTemplates },
    nodeID: replicaID,
    version: version(),
    extraRoutes: [{ prefix: CLUSTER_PREFIX, handle: clusterRpcHandler(cp, secret, log.child({ component: 'cluster-rpc' }), relay) }],
  });
  const addr = await api.listen(listen.host, listen.port);
  config.setOverrides(overridesOf(flags, config.config, { listen: addr }));
  log.info({ url: `http://${addr.address}:${addr.port}`, configDir, role: 'control' }, 'cubed control ready');
  onSignals(log, async () => {
    await api.close();
    await cp.stop();
    await store.close();
    config.close();
  });
}

async function runCompute(flags: Flags): Promise<void> {
  const controls = (flags.control ?? '')
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);
  if (controls.length === 0) throw new UsageError('--role compute needs --control http://ADDR:PORT[,http://ADDR2:PORT]');
  for (const c of controls) if (!URL.canParse(c)) throw new UsageError(`--control ${c}: not a URL`);
  const secret = requireSecret(flags.apiKey);
  const m = await nodeModules();
  const {
    TemplateStore,
    FetchingCatalog,
    ControlLayerSource,
    simNode,
    simNodeSpecs,
    simNodePath,
    simNodeDataDir,
    simNodeRouter,
    nodeRpcHandler,
    nodeUpgradeHandler,
    rejectUpgrade,
    FenceBook,
    HeartbeatSender,
  } = m;
  const { config, nodeID, dataDir, listen, log, unlock } = openNode(flags);
  if ((listen.host === '0.0.0.0' || listen.host === '::') && !flags.advertise) {
    unlock();
    throw new UsageError(`--listen ${flags.listen}: a wildcard address needs --advertise http://ADDR:PORT (where control replicas reach this node)`);
  }
  const runtime = runtimeOf(m, flags, config);
  const { tag, release } = claimNode(nodeID, dataDir, config, runtime);
  const simCount = flags.simNodes === undefined ? 0 : Number(flags.simNodes);
  if (flags.simNodes !== undefined && !(Number.isInteger(simCount) && simCount >= 1 && simCount <= 10_000)) {
    unlock();
    throw new UsageError(`--sim-nodes ${flags.simNodes}: expected a whole number from 1 to 10000`);
  }
  if (simCount > 0 && runtime !== 'sim') {
    unlock();
    throw new UsageError('--sim-nodes needs --runtime sim (or cubelet.runtime = "sim"): only simulated nodes can share a process');
  }
  // One node, or (sim) many behind one listener, each under /sim/<nodeID>.
  // A real node fetches the templates it lacks from the control plane (templates/fetch.ts) and serves its own to the others.
  const templates = runtime !== 'sim' ? new TemplateStore(dataDir) : undefined;
  if (templates) await startStore(m, templates, log);
  const catalog = templates ? new FetchingCatalog({ store: templates, source: new ControlLayerSource({ controls, secret, nodeID }), nodeID }) : undefined;
  const nodes =
    simCount > 0
      ? simNodeSpecs(simCount, flags.nodeIdPrefix ?? 'sim-').map((spec) => ({
          path: simNodePath(spec.nodeID),
          ...simNode({
            nodeID: spec.nodeID,
            dataDir: simNodeDataDir(dataDir, spec.nodeID),
            config: () => config.config,
            log: log.child({ component: 'cubelet', runtime: 'sim', nodeID: spec.nodeID }),
            spec,
          }),
        }))
      : [{ path: '', ...buildCubelet(m, nodeID, tag, dataDir, config, log, runtime, templates, catalog) }];
  const builds = simCount > 0 ? undefined : (nodes[0] as { builds?: TemplateBuilder }).builds;
  await builds?.restore();
  let adopted = 0;
  let removed = 0;
  for (const n of nodes) {
    const r = await n.cubelet.start();
    adopted += r.adopted.length;
    removed += r.removed.length;
  }
  const health = (_req: IncomingMessage, res: ServerResponse) =>
    sendJson(res, 200, { status: 'ok', nodeID, role: 'compute', runtime, nodes: nodes.length, version: version() });
  const rpcLog = log.child({ component: 'node-rpc' });
  const handlers = await Promise.all(
    nodes.map(
      async (n) =>
        [
          n.cubelet.nodeID,
          nodeRpcHandler(
            n.api,
            secret,
            new FenceBook(
              simCount > 0 ? simNodeDataDir(dataDir, n.cubelet.nodeID) : dataDir,
              (await n.api.listSandboxes()).map((s) => s.sandboxID),
            ),
            rpcLog,
            simCount > 0 ? undefined : catalog,
            builds,
          ),
        ] as const,
    ),
  );
  const rpc =
    simCount > 0
      ? simNodeRouter(new Map(handlers), (req, res) =>
          req.url === '/health' ? health(req, res) : sendError(res, new CubeError('NOT_FOUND', `no simulated node at ${req.url}`), 'admin'),
        )
      : handlers[0]![1];
  const upgrade =
    simCount > 0
      ? simNodeRouter(new Map(nodes.map((n) => [n.cubelet.nodeID, nodeUpgradeHandler(n.api, secret)])), (_req: IncomingMessage, socket: Duplex) =>
          rejectUpgrade(socket, 404, { code: 404, message: 'no simulated node there' }),
        )
      : nodeUpgradeHandler(nodes[0]!.api, secret);
  const server = createServer((req, res) => (req.url === '/health' ? health(req, res) : rpc(req, res)));
  server.on('upgrade', upgrade);
  server.requestTimeout = 0;
  await new Promise<void>((ok, fail) => server.once('error', fail).listen(listen.port, listen.host, ok));
  const port = (server.address() as { port: number }).port;
  const address = flags.advertise ?? `http://${listen.host.includes(':') ? `[${listen.host}]` : listen.host}:${port}`;
  const members: HeartbeatMember[] = nodes.map((n) => ({ node: n.api, address: address.replace(/\/+$/, '') + n.path }));
  const heartbeat = new HeartbeatSender({ nodes: members, to: { controls, secret }, log: log.child({ component: 'heartbeat' }), config });
  heartbeat.start();
  log.info({ address, controls, dataDir, tag, runtime, nodes: nodes.length, adopted, cleaned: removed, role: 'compute' }, 'cubed compute ready');
  onSignals(log, async (signal) => {
    const destroy = flags.destroyOnExit === true || signal === 'SIGUSR2';
    log.info({ signal, destroy }, destroy ? 'stopping: destroying every sandbox and the pool' : 'stopping: sandboxes stay for the next start');
    await heartbeat.stop();
    server.closeAllConnections();
    await new Promise((r) => server.close(r));
    for (const n of nodes) await n.cubelet.stop({ destroy });
    await builds?.flush();
    config.close();
    release();
    unlock();
  });
}

export async function main(argv: string[]): Promise<void> {
  const program = new Command('cubed')
    .description('Sandboxes for AI-agent rollouts: E2B-compatible API, admin API, scheduler and node agent in one daemon.')
    .version(version())
    .addOption(new Option('--role <role>', 'what this process runs').choices(['all', 'control', 'compute']).default('all'))
    .option('--listen <addr>', 'address:port of the API (default: api.listen, 127.0.0.1:3000)')
    .option('--data-dir <dir>', 'sandboxes, templates and state (default: data_dir, /var/lib/cubed)')
    .option('--config-dir <dir>', 'directory with cubemaster.yaml and cubelet.toml')
    .option('--api-key <key>', 'the API key clients must send (default: $CUBE_API_KEY or <data-dir>/api-key)')
    .option('--node-id <name>', "this node's name (default: node_id, else the host name)")
    .option(
      '--sandbox-domain <domain>',
      'route Host <port>-<sandboxID>.<domain> to that port of the sandbox and return it as `domain` to E2B clients (default: api.sandbox_domain)',
    )
    .option('--destroy-on-exit', 'on SIGTERM/SIGINT destroy every sandbox and the network pool')
    .option('--redis <url>', 'control: Redis for live state, e.g. redis://127.0.0.1:6379/0')
    .option('--mysql <url>', 'control: MySQL/MariaDB for records, e.g. mysql://root@127.0.0.1:3306/cube')
    .option('--redis-prefix <prefix>', 'control: prefix of every Redis key (default cube:v1:)')
    .option('--control <urls>', 'compute: control replica URL(s), comma-separated')
    .option('--advertise <url>', "compute: URL control replicas reach this node's RPC at (default: http://<listen>)")
    .addOption(
      new Option(
        '--runtime <runtime>',
        'runtime driver (default: cubelet.runtime, ns); microvm: a QEMU microVM per sandbox (npm run build makes its kernel and initramfs); sim is a SIMULATION for benchmarks',
      ).choices(['ns', 'microvm', 'sim']),
    )
    .option('--sim-nodes <n>', 'compute with --runtime sim: stand for N simulated nodes in this one process')
    .option('--node-id-prefix <prefix>', 'with --sim-nodes: node names are <prefix>0000, <prefix>0001, ... (default sim-)')
    .addHelpText('after', HELP_AFTER)
    .showHelpAfterError()
    .exitOverride((e) => process.exit(e.exitCode === 0 ? 0 : 2));
  program.parse(argv);
  const flags = program.opts<Flags>();
  try {
    await (flags.role === 'control' ? runControl(flags) : flags.role === 'compute' ? runCompute(flags) : runAll(flags));
  } catch (e) {
    const usage = e instanceof UsageError || (isCubeError(e) && e.kind === 'CONFIG_INVALID');
    process.stderr.write(`cubed: ${(e as Error).message.replace(/\n/g, '\n  ')}\n`);
    process.exit(e instanceof HostTaken ? e.exitCode : usage ? 2 : 1);
  }
}

await main(process.argv);
