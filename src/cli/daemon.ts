// cubed: the daemon. Role all runs the API, the local placement step, the cubelet and the
// network-agent in one process with embedded state. See `cubed --help`.
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { hostname } from 'node:os';
import { join } from 'node:path';
import type { Duplex } from 'node:stream';
import { Command, Option } from 'commander';
import pino, { type Logger } from 'pino';
import { sendError, sendJson } from '../http.js';
import { resolveConfigDir } from '../config/loader.js';
import { ConfigStore } from '../config/store.js';
import type { HeartbeatMember } from '../cubelet/heartbeat.js';
import { clusterSecret } from '../cubelet/rpc-wire.js';
import { CubeError, isCubeError } from '../errors.js';
import { HostTaken } from '../cubelet/host-claims.js';
import type { TemplateBuilder } from '../templates/build/build.js';
import { type Flags, version, parseListen, UsageError, apiConfig, overridesOf, openNode, logBootstrap, onSignals } from './daemon/setup.js';
import { runtimeOf, buildCubelet, startStore, claimNode, templateStoreOf } from './daemon/node.js';
import { controlModules, clusterModules, nodeModules } from './daemon/modules.js';
import { startDns } from './daemon/dns.js';

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
  (data_dir), --node-id (node_id). api.dns.listen (off by default) makes roles all and
  control answer DNS for the sandbox domain themselves (docs/e2b.md).

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

async function runAll(flags: Flags): Promise<void> {
  const { configDir, config, nodeID, dataDir, listen, log, unlock } = openNode(flags);
  const master = apiConfig(config, flags);
  const dns = await startDns(master, listen.host, log);
  const [{ resolveApiKey, EmbeddedStore, ControlPlaneService, inProcessControl, createApiServer }, m] = await Promise.all([controlModules(), nodeModules()]);
  const { FenceBook, HeartbeatSender } = m;
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
  const templates = runtime !== 'sim' ? templateStoreOf(m, dataDir, config) : undefined;
  const { cubelet, api: node, builds, releaseHolds } = buildCubelet(m, nodeID, tag, dataDir, config, log, runtime, templates);
  await builds?.restore();
  const t0 = performance.now();
  const { adopted, removed } = await cubelet.start();
  if (templates) await startStore(m, templates, log, adopted.length); // after start: the layers are in the node's store, mounted by it
  await releaseHolds?.(); // of the sandboxes not taken back
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
  const vols = await cp.volumes.sweep(node);
  if (vols.data.length || vols.records.length) log.warn({ unrecorded: vols.data, dataGone: vols.records }, 'volumes swept at start');
  const api = createApiServer({
    ctx: {
      cp,
      log: log.child({ component: 'api' }),
      config: master,
      ...(templates ? { templates, registryInsecure: () => config.config.cubelet.registry.insecure } : {}),
      ...(templates && builds ? { builds } : {}),
    },
    nodeID,
    version: version(),
    ...(dns ? { dnsQueries: () => dns.counts } : {}),
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
    await dns?.close();
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
  const master = apiConfig(config, flags);
  const dns = await startDns(master, listen.host, log);
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
    lease: (name, nodeID, ttlMs) => (ttlMs ? store.holdLease(name, nodeID, ttlMs) : store.releaseLease(name, nodeID)),
  });
  const clusterTemplates = new ClusterTemplates({
    nodes: () => cp.listNodes(),
    client: (v) => relay.node(v),
    book: store,
    secret,
    memoryMiB: () => config.config.master.sandbox.default_spec.memory_mib,
    templatesChanged: (v) => relay.templatesChanged(v),
  });
  const api = createApiServer({
    ctx: { cp, log: log.child({ component: 'api' }), config: master, relay, clusterTemplates },
    nodeID: replicaID,
    version: version(),
    ...(dns ? { dnsQueries: () => dns.counts } : {}),
    extraRoutes: [{ prefix: CLUSTER_PREFIX, handle: clusterRpcHandler(cp, secret, log.child({ component: 'cluster-rpc' }), relay) }],
  });
  const addr = await api.listen(listen.host, listen.port);
  config.setOverrides(overridesOf(flags, config.config, { listen: addr }));
  log.info({ url: `http://${addr.address}:${addr.port}`, configDir, role: 'control' }, 'cubed control ready');
  onSignals(log, async () => {
    await api.close();
    await dns?.close();
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
  const templates = runtime !== 'sim' ? templateStoreOf(m, dataDir, config) : undefined;
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
    await (n as { releaseHolds?: () => Promise<void> }).releaseHolds?.(); // of the sandboxes not taken back
    adopted += r.adopted.length;
    removed += r.removed.length;
  }
  if (templates) await startStore(m, templates, log, adopted); // after start: the layers are in the node's store, mounted by it
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
