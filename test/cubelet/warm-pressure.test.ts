// A warm pool under host memory pressure, on the real ns driver and network-agent: a node whose
// capacity is read from the host (no [quota]) holds warm sandboxes while MemAvailable is above its
// reserve, gives them back within a round of the pool once it falls under it (as the mem filter
// then takes no create either), and makes one again when memory comes back. The host's memory
// figure is the one reading faked here (the machine cannot be pushed under a reserve safely).
import { mkdirSync, mkdtempSync } from 'node:fs';
import { join } from 'node:path';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ConfigStore } from '../../src/config/store.js';
import { Cubelet } from '../../src/cubelet/cubelet.js';
import { HOST } from '../../src/cubelet/host-metrics.js';
import { newSandboxID, nodeTag } from '../../src/ids.js';
import type { NodeView } from '../../src/model/node.js';
import { NsNetworkAgent } from '../../src/network/agent.js';
import { parseRange } from '../../src/network/ipam.js';
import { NsDriver } from '../../src/runtime/ns/driver.js';
import { TemplateStore } from '../../src/templates/store.js';
import { until } from '../helpers/cluster.js';
import { countKernelObjects, defaultNetworkPolicy, testCidr, uniqueNodeID, tearDownNode } from '../helpers/kernel.js';

const nodeID = uniqueNodeID('warm');
const tag = nodeTag(nodeID);
const dir = mkdtempSync('/tmp/cubed-test-warm-pressure-');
const dataDir = join(dir, 'data');
const cidr = testCidr();
const TOTAL_MIB = 16_384; // reserve: 25% (host.detected.mem_reserved_percent) = 4096 MiB
let availableMiB = 12_000;
let cubelet: Cubelet;
let config: ConfigStore;

beforeAll(async () => {
  mkdirSync(dataDir);
  mkdirSync(join(dir, 'config'));
  config = new ConfigStore(join(dir, 'config'), { watch: false });
  const log = pino({ level: 'silent' });
  const store = new TemplateStore(dataDir);
  // `host` with a start command: a template a warm pool is kept for.
  const templates = {
    resolve: async (name: string) =>
      name === 'started'
        ? { ...(await store.resolve('host')), name, config: { env: {}, workdir: '', user: 'user', startCmd: 'exec sleep 1000' } }
        : store.resolve(name),
    listTemplates: () => store.listTemplates(),
  };
  cubelet = new Cubelet({
    nodeID,
    dataDir,
    driver: new NsDriver({ dataDir, nodeTag: tag, log }),
    network: new NsNetworkAgent({ nodeTag: tag, cidr, initNum: 2, policy: defaultNetworkPolicy(), log }),
    templates,
    config: () => config.config,
    log,
    poolSlotLimit: parseRange(cidr).maxIndex,
    host: { ...HOST, meminfo: () => ({ totalMiB: TOTAL_MIB, availableMiB }) },
  });
  await cubelet.start();
});

afterAll(() => tearDownNode({ tag, dir, stop: () => cubelet?.stop({ destroy: true }), close: () => config?.close() }));

const ready = async (n: number): Promise<NodeView['warm']> => {
  const w = (await cubelet.nodeView()).warm;
  return (w?.templates.started?.ready ?? 0) === n && (w?.templates.started?.starting ?? 0) === 0
    ? (w ?? { templates: {}, footprintMiB: 0, hits: 0, misses: 0 })
    : undefined;
};

describe('warm pool under memory pressure', () => {
  it('gives its warm sandboxes back while MemAvailable is under the reserve, and refills after', async () => {
    const spec = config.config.master.sandbox.default_spec;
    const s = await cubelet.createSandbox({
      sandboxID: newSandboxID(),
      templateID: 'started',
      cpus: spec.cpus,
      memoryMiB: spec.memory_mib,
      diskGiB: spec.disk_gib,
      endAt: Date.now() + 300_000,
      env: {},
      metadata: {},
    });
    await until('a warm sandbox', () => ready(1), 60_000);
    expect((await cubelet.listSandboxes()).map((v) => v.sandboxID)).toEqual([s.sandboxID]);
    availableMiB = 3_000;
    await until('the warm sandbox given back', () => ready(0), 30_000);
    expect((await countKernelObjects(tag)).cgroups).toBeGreaterThan(0); // the real one stays
    availableMiB = 12_000;
    await until('a warm sandbox again', () => ready(1), 60_000);
    await cubelet.destroySandbox(s.sandboxID);
  }, 180_000);
});
