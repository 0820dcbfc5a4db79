// SIMULATED nodes: a real Cubelet (state machine, process table, timeouts, node view) over the
// sim driver and sim network, so that one process can stand for many compute nodes
// (`cubed --role compute --runtime sim --sim-nodes 1000`). Each node gets a capacity from a
// fixed, varied table and reports a CPU utilisation derived from what it holds (the host's
// own load says nothing about a node that does not exist); everything else in its view is
// what the cubelet computes.
import type { IncomingMessage } from 'node:http';
import { join } from 'node:path';
import type { Logger } from 'pino';
import type { Config } from '../config/schema.js';
import { Cubelet, type TemplateCatalog } from './cubelet.js';
import type { SandboxMeta } from './meta.js';
import { sharedHostReadings } from './host-metrics.js';
import { CubeError } from '../errors.js';
import { nodeTag } from '../ids.js';
import type { NodeView } from '../model/node.js';
import { parseRange } from '../network/ipam.js';
import type { TemplateRef } from '../runtime/types.js';
import { SimDriver } from '../runtime/sim/driver.js';
import { SimNetworkAgent } from '../runtime/sim/network.js';
import { HOST_TEMPLATE } from '../model/template.js';

export interface SimNodeSpec {
  nodeID: string;
  cpus: number;
  memoryMiB: number;
  templates: string[];
}

const CPUS = [16, 32, 48, 64, 96, 128];
/** The host readings every simulated node of this process shares (they stand on one host). */
const SIM_HOST = sharedHostReadings(500);

/**
 * The host figures a simulated node's view shows (MemTotal, the data dir's disk use: its CPU and
 * available memory are simulatedUsage's) as the shared readings have them now; the disk figure
 * as last read (undefined before).
 */
const hostFigures = (() => {
  let disk: Promise<number> | undefined;
  let diskUsedPercent: number | undefined;
  return (dataDir: string): { memTotalMiB: number; diskUsedPercent?: number } => {
    const p = SIM_HOST.diskUsedPercent(dataDir);
    if (p !== disk) {
      disk = p;
      p.then(
        (d) => (diskUsedPercent = d),
        () => undefined, // a failed read shows in the next view built
      );
    }
    return { memTotalMiB: SIM_HOST.meminfo().totalMiB, ...(diskUsedPercent !== undefined ? { diskUsedPercent } : {}) };
  };
})();

const GIB_PER_CPU = [2, 4, 8];

/** `count` nodes named <prefix>0000.. with varied capacity; every third also has the `python` template (pure, deterministic). */
export function simNodeSpecs(count: number, prefix: string): SimNodeSpec[] {
  const width = Math.max(4, String(count - 1).length);
  return Array.from({ length: count }, (_, i) => {
    const cpus = CPUS[i % CPUS.length]!;
    return {
      nodeID: `${prefix}${String(i).padStart(width, '0')}`,
      cpus,
      memoryMiB: cpus * GIB_PER_CPU[Math.floor(i / CPUS.length) % GIB_PER_CPU.length]! * 1024,
      templates: i % 3 === 2 ? [HOST_TEMPLATE, 'python'] : [HOST_TEMPLATE],
    };
  });
}

/** Templates of a simulated node: names only, nothing on disk. */
class SimTemplates implements TemplateCatalog {
  constructor(private readonly names: string[]) {}

  async resolve(name: string): Promise<TemplateRef> {
    if (!this.names.includes(name))
      throw new CubeError('NOT_FOUND', `template '${name}' not found on this node (simulated templates: ${this.names.join(', ')})`);
    return { name, layers: ['/(simulated)'], bindHostUsr: false };
  }

  async listTemplates(): Promise<TemplateRef[]> {
    return Promise.all(this.names.map((n) => this.resolve(n)));
  }
}

/** The node's view with a CPU utilisation that follows its simulated load: a small idle base plus a quarter of a vCPU per allocated vCPU (pure). */
export function simulatedUsage(v: NodeView): NodeView {
  const util = Math.min(100, 2 + (25 * v.usage.quotaCpuUsed) / Math.max(1, v.capacity.cpus));
  const memAvailableMiB = Math.max(0, Math.round(v.capacity.memoryMiB - v.usage.quotaMemUsedMiB));
  return { ...v, usage: { ...v.usage, cpuUtilPercent: Math.round(util * 10) / 10, memAvailableMiB } };
}

export interface SimNode {
  cubelet: Cubelet;
  /**
   * What the node serves and reports: the cubelet with simulated usage in its view, and no
   * sandbox address for port traffic (a simulated sandbox has no network; its address from the
   * range routes nowhere on this host, or somewhere else entirely).
   */
  api: Cubelet;
}

/** The config in force with this node's declared capacity laid over cubelet.quota (rebuilt only when the config changes). */
function withQuota(config: () => Config, spec: Pick<SimNodeSpec, 'cpus' | 'memoryMiB'> | undefined): () => Config {
  if (!spec) return config;
  let base: Config | undefined;
  let merged!: Config;
  return () => {
    const c = config();
    if (c !== base) {
      base = c;
      merged = { ...c, cubelet: { ...c.cubelet, quota: { cpus: spec.cpus, memory_mib: spec.memoryMiB } } };
    }
    return merged;
  };
}

/**
 * One simulated node on `dataDir`. `spec` sets capacity and templates; without it the node
 * takes cubelet.quota and the host template, like a real node.
 */
export function simNode(o: { nodeID: string; dataDir: string; config: () => Config; log: Logger; spec?: SimNodeSpec }): SimNode {
  const cidr = o.config().cubelet.plugins['io.cubelet.internal.v1.network'].cidr;
  const config = withQuota(o.config, o.spec);
  const driver = new SimDriver({ dataDir: o.dataDir });
  const cubelet = new Cubelet({
    nodeID: o.nodeID,
    dataDir: o.dataDir,
    driver,
    meta: driver.metaKeeper<SandboxMeta>(),
    network: new SimNetworkAgent({ nodeTag: nodeTag(o.nodeID), cidr }),
    templates: new SimTemplates(o.spec?.templates ?? [HOST_TEMPLATE]),
    config,
    log: o.log,
    poolSlotLimit: parseRange(cidr).maxIndex,
    host: SIM_HOST,
  });
  // A simulated node's view and list change only with its sandboxes (each change of one is a
  // notice of the cubelet, its pool's included: a slot is taken or given back before the
  // sandbox's next notice), its config and the host figures (hostFigures). Taking them anyway, 1000
  // nodes a second, was 6% of a core with no creates (bench/cluster-sim.ts).
  let changes = 0;
  cubelet.subscribe((e) => {
    if (e.type !== 'event') changes++;
  });
  let configSeen: Config | undefined;
  /** The host figures of the last view built: another figure now moves the version (until a view shows it: a view may be built from a host sample up to 500 ms old). */
  let shown: NodeView['usage'] | undefined;
  const stateVersion = () => {
    const c = config();
    const host = hostFigures(o.dataDir);
    if (
      c !== configSeen ||
      (shown && (host.memTotalMiB !== shown.memTotalMiB || (host.diskUsedPercent !== undefined && host.diskUsedPercent !== shown.diskUsedPercent)))
    )
      changes++;
    configSeen = c;
    return changes;
  };
  const api = new Proxy(cubelet, {
    get(target, key) {
      if (key === 'stateVersion') return stateVersion;
      if (key === 'nodeView')
        return async () => {
          const v = simulatedUsage(await target.nodeView());
          shown = v.usage;
          return v;
        };
      if (key === 'sandboxAddress')
        return async (sandboxID: string) => {
          await target.sandboxAddress(sandboxID); // 130404 for an unknown sandbox, as on any node
          throw new CubeError('CONFLICT', `sandbox ${sandboxID} is simulated (runtime sim): it has no network, so its ports cannot be reached`);
        };
      const v = Reflect.get(target, key, target) as unknown;
      return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
    },
  });
  return { cubelet, api };
}

/** Where node `nodeID` of a multi-node sim process serves its RPC, below the process's one listener. */
export const simNodePath = (nodeID: string) => `/sim/${encodeURIComponent(nodeID)}`;

/** Routes /sim/<nodeID>/<rest> to that node's handler (requests or upgrades) with the URL rewritten to /<rest>. */
export function simNodeRouter<A extends unknown[]>(
  handlers: Map<string, (req: IncomingMessage, ...rest: A) => void>,
  fallback: (req: IncomingMessage, ...rest: A) => void,
): (req: IncomingMessage, ...rest: A) => void {
  return (req, ...rest) => {
    const m = /^\/sim\/([^/?]+)(\/.*)?$/.exec(req.url ?? '/');
    const h = m ? handlers.get(decodeURIComponent(m[1]!)) : undefined;
    if (!m || !h) return fallback(req, ...rest);
    req.url = m[2] ?? '/';
    h(req, ...rest);
  };
}

/** Per-node data dir of a multi-node sim process. */
export const simNodeDataDir = (dataDir: string, nodeID: string) => join(dataDir, 'sim', nodeID);
