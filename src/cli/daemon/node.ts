// The node agent of roles all and compute: which runtimes, the host claim, the runtime driver(s),
// the network agent and the cubelet built from the config.
import type { Logger } from 'pino';
import type { CubeletConfig } from '../../config/schema.js';
import type { ConfigStore } from '../../config/store.js';
import type { Cubelet } from '../../cubelet/cubelet.js';
import { nodeTag } from '../../ids.js';
import type { NodeSandboxLimits } from '../../model/limits.js';
import { ID_RANGE } from '../../runtime/ns/ids.js';
import { claimHost, dataDirTag } from '../../cubelet/host-claims.js';
import type { NsDriverOptions } from '../../runtime/ns/driver.js';
import type { RuntimeDriver } from '../../runtime/types.js';
import type { TemplateBuilder } from '../../templates/build/build.js';
import type { TemplateStore } from '../../templates/store.js';
import type { FetchingCatalog } from '../../templates/fetch.js';
import { type Flags, UsageError } from './setup.js';
import type { NodeModules } from './modules.js';

export type Runtimes = 'sim' | ('ns' | 'microvm')[];

/** The runtimes in force: --runtime, else cubelet.runtime (one, or the list a node offers; the first is the default). */
export function runtimeOf(m: NodeModules, flags: Flags, config: ConfigStore): Runtimes {
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
export function buildCubelet(
  m: NodeModules,
  nodeID: string,
  tag: string,
  dataDir: string,
  config: ConfigStore,
  log: Logger,
  runtime: Runtimes,
  templates = templateStoreOf(m, dataDir, config),
  catalog?: FetchingCatalog,
): { cubelet: Cubelet; api: Cubelet; builds?: TemplateBuilder; releaseHolds?: () => Promise<void> } {
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
    allowNetRaw: config.config.cubelet.identity.allow_net_raw,
    sandboxLimits: sandboxLimitsOf(config.config.cubelet.sandbox_limits),
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
  // The layers of a removed template go once the sandboxes running from it ended (TemplateStore.releaseHolds).
  const releaseHolds = () =>
    templates
      .releaseHolds(async (id) => (await cubelet!.getSandbox(id)) !== undefined)
      .then(
        (ended) => void (ended.length && log.info({ sandboxes: ended }, 'layers held for sandboxes of removed templates released')),
        (err: unknown) => log.warn({ err }, 'releasing held layers failed'),
      );
  cubelet.subscribe((e) => void (e.type === 'sandbox.removed' && releaseHolds()), { backlog: false });
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
        ...(catalog ? { fetchTemplate: (name: string) => catalog.resolve(name), peers: catalog } : {}),
      })
    : undefined;
  return { cubelet, api: cubelet, releaseHolds, ...(builds ? { builds } : {}) };
}

/** The node's template store, its per-import unpack bound (cubelet storage.layer_unpack_max_gib) read from the live config. */
export function templateStoreOf(m: NodeModules, dataDir: string, config: ConfigStore): TemplateStore {
  return new m.TemplateStore(dataDir, () => config.config.cubelet.storage.layer_unpack_max_gib * 1024 ** 3);
}

/**
 * The template store at start, once the node's store is mounted (cubelet.start: the layers live in
 * it) and its sandboxes taken back (`adopted` of them): layers of a data dir from an earlier
 * version moved in, scratch left by a crash cleared, layers no template holds removed.
 */
export async function startStore(m: NodeModules, templates: TemplateStore, log: Logger, adopted: number): Promise<void> {
  const moved = await m.migrateLayers(templates.dataDir, adopted);
  if (moved) log.info({ entries: moved }, `moved ${moved} layer store entries from ${m.legacyLayersDir(templates.dataDir)} into the store`);
  await m.cleanScratch(templates.dataDir);
  const removed = await templates.collectGarbage();
  if (removed.length) log.info({ layers: removed }, `removed ${removed.length} layer(s) no template holds`);
}

/** One driver, or a RuntimeSet when the node offers several. */
export function runtimeDriver(
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
    allowNetRaw: boolean;
    sandboxLimits: NodeSandboxLimits;
    declaredMemoryMiB?: number;
  },
): RuntimeDriver {
  const { NsDriver, MicrovmDriver, readMeminfo, RuntimeSet } = m;
  const { declaredMemoryMiB, snapshots, consoleLogBytes, identity, allowNetRaw, sandboxLimits, ...common } = o;
  // The ns driver limits its sandboxes together at the declared quota only (none declared: no
  // limit of ours); a microVM is refused when it cannot fit the node (declared, else MemTotal).
  const ns = runtimes.includes('ns')
    ? new NsDriver({ ...common, identity, allowNetRaw, sandboxLimits, ...(declaredMemoryMiB ? { nodeMemoryMiB: declaredMemoryMiB } : {}) })
    : undefined;
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
          ...(ns ? { storage: ns.storage, volumes: ns.volumes } : {}),
        }),
  );
  return drivers.length === 1 && drivers[0]!.name === 'ns' ? drivers[0]! : new RuntimeSet(drivers);
}

/** cubelet sandbox_limits as the ns driver's option. */
export function sandboxLimitsOf(c: CubeletConfig['sandbox_limits']): NodeSandboxLimits {
  const { read_mibps, write_mibps, read_iops, write_iops } = c.io;
  return { openFilesShare: c.open_files_share, io: { readMiBps: read_mibps, writeMiBps: write_mibps, readIops: read_iops, writeIops: write_iops } };
}

/** cubelet identity.* as the ns driver's option. */
export function identityOf(c: { userns: boolean; host_id_base: number; host_id_ranges: number }): NonNullable<NsDriverOptions['identity']> {
  return { userns: c.userns, hostIdBase: c.host_id_base, hostIdRanges: c.host_id_ranges };
}

/**
 * The node's claim on the host (src/cubelet/host-claims.ts): its node id, tag, pool CIDR and
 * sandbox host ids, refused with HostTaken (exit 3) when a live daemon holds one or the CIDR meets
 * a route of the host. A simulated node makes no kernel object and claims nothing.
 */
export function claimNode(nodeID: string, dataDir: string, config: ConfigStore, runtime: Runtimes): { tag: string; release: () => void } {
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
