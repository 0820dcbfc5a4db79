// Role all wired in-process as src/cli/daemon.ts runAll wires it, over a simulated node: a
// temporary config dir with the shipped files, the embedded store, and (soloNode) the node with
// its fence book. Every piece registers its own cleanup, run in reverse by the caller.
import { copyFileSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino, { type Logger } from 'pino';
import { packageRoot } from '../../src/config/loader.js';
import { ConfigStore } from '../../src/config/store.js';
import { FenceBook } from '../../src/cubelet/fences.js';
import { simNode, type SimNode } from '../../src/cubelet/sim-nodes.js';
import { EmbeddedStore } from '../../src/store/embedded.js';
import { createApiServer } from '../../src/api/server.js';
import { inProcessControl } from '../../src/control/wiring.js';
import { ControlPlaneService } from '../../src/control/service.js';
import { HeartbeatSender } from '../../src/cubelet/heartbeat.js';
import type { NodeApi } from '../../src/cubelet/types.js';

export type Cleanups = (() => Promise<void> | void)[];

/** A temporary config dir holding the shipped cubemaster.yaml and cubelet.toml, removed at cleanup. */
export function soloConfigDir(name: string, cleanups: Cleanups): string {
  const dir = mkdtempSync(join(tmpdir(), `cube-test-${name}-`));
  cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
  for (const f of ['cubemaster.yaml', 'cubelet.toml']) copyFileSync(join(packageRoot(), 'config', f), join(dir, f));
  return dir;
}

/** The config, the embedded store and a started simulated node 'local' with its fence book, on a new config dir. */
export async function soloNode(
  name: string,
  cleanups: Cleanups,
): Promise<{ dir: string; config: ConfigStore; log: Logger; store: EmbeddedStore; sim: SimNode; fences: FenceBook }> {
  const dir = soloConfigDir(name, cleanups);
  const config = new ConfigStore(dir, { watch: false });
  cleanups.push(() => config.close());
  const log = pino({ level: 'silent' });
  const store = new EmbeddedStore({ path: join(dir, 'cubed.db') });
  await store.init();
  cleanups.push(() => store.close());
  const sim = simNode({ nodeID: 'local', dataDir: join(dir, 'node'), config: () => config.config, log });
  await sim.cubelet.start();
  cleanups.push(() => sim.cubelet.stop({ destroy: true }));
  return { dir, config, log, store, sim, fences: new FenceBook(join(dir, 'node'), []) };
}

/**
 * The control plane over `node` (the solo node's api, or a wrapper of it) as daemon.ts runAll
 * wires it, with the node's first heartbeat in and the API served on loopback with `apiKey`:
 * returns the control plane, the node's heartbeat sender and the SDK's connection options.
 */
export async function soloApi(
  solo: Awaited<ReturnType<typeof soloNode>>,
  node: NodeApi,
  apiKey: string,
  cleanups: Cleanups,
  tickMs?: number,
): Promise<{ cp: ControlPlaneService; heartbeat: HeartbeatSender; opts: { apiKey: string; apiUrl: string; sandboxUrl: string } }> {
  const { config, log, store, sim, fences } = solo;
  const cp = new ControlPlaneService({
    store,
    config,
    log,
    replicaID: 'local',
    ...inProcessControl([{ node, fences }]),
    ...(tickMs !== undefined ? { tickMs } : {}),
  });
  await cp.start();
  cleanups.push(() => cp.stop());
  const heartbeat = new HeartbeatSender({ nodes: [{ node: sim.api, address: 'in-process' }], to: { local: (b) => cp.heartbeats(b.heartbeats, true) }, log });
  if (!(await heartbeat.beat())) throw new Error('the first heartbeat was not taken');
  await cp.keys.bootstrap(apiKey);
  const api = createApiServer({ ctx: { cp, log, config: () => config.config.master }, nodeID: 'local', version: 'test' });
  const addr = await api.listen('127.0.0.1', 0);
  cleanups.push(() => api.close());
  const url = `http://127.0.0.1:${addr.port}`;
  return { cp, heartbeat, opts: { apiKey, apiUrl: url, sandboxUrl: url } };
}
