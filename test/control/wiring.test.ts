// Role all and a cluster differ in the control plane only by what wiring.ts picks: role all's
// in-process feed pushes events to watchers as they are appended and its `config set` writes the
// files; a cluster replica's store feed leaves events to the tick's poll of the store (other
// replicas append too) and its sets go to the store only. No tick runs here (an hour apart).
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, expect, it } from 'vitest';
import { FilesConfig, StoreConfig } from '../../src/control/config-authority.js';
import { LocalNodes, RemoteNodes } from '../../src/control/node-directory.js';
import { InProcessFeed, StoreFeed } from '../../src/control/node-feed.js';
import { ControlPlaneService } from '../../src/control/service.js';
import { clusterControl, inProcessControl, type ControlWiring } from '../../src/control/wiring.js';
import { HeartbeatSender } from '../../src/cubelet/heartbeat.js';
import type { WatchMessage } from '../../src/model/watch.js';
import { soloNode, type Cleanups } from '../helpers/solo.js';

// Cleaned up after both.
const cleanups: Cleanups = [];
afterAll(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

/** A control plane over `wire`, its node registered, a watcher on it; then a cordon and a config set. */
async function cordonAndSet(name: string, wire: (n: Awaited<ReturnType<typeof soloNode>>) => ControlWiring) {
  const n = await soloNode(name, cleanups);
  const wiring = wire(n);
  const cp = new ControlPlaneService({ store: n.store, config: n.config, log: n.log, replicaID: 'local', tickMs: 3_600_000, ...wiring });
  await cp.start();
  cleanups.push(() => cp.stop());
  const heartbeat = new HeartbeatSender({
    nodes: [{ node: n.sim.api, address: 'in-process' }],
    to: { local: (b) => cp.heartbeats(b.heartbeats, true) },
    log: n.log,
  });
  expect(await heartbeat.beat()).toBe(true);
  const got: WatchMessage[] = [];
  cleanups.push(cp.watch((m) => got.push(m)));
  await cp.nodeAction({ nodeID: 'local', action: 'cordon' });
  await cp.setConfig('host.quota.paused_resource_release_ratio', 0.5);
  return {
    wiring,
    cordonEvent: got.some((m) => m.type === 'event' && m.event.kind === 'node.cordoned'),
    nodeMessage: got.some((m) => m.type === 'node' && m.node.nodeID === 'local' && m.node.cordoned),
    inForce: n.config.config.master.host.quota.paused_resource_release_ratio,
    files: readFileSync(join(n.dir, 'cubemaster.yaml'), 'utf8'),
  };
}

it('role all: the in-process feed pushes events to watchers at once, and a config set writes the files', async () => {
  const r = await cordonAndSet('wiring-all', (n) => inProcessControl([{ node: n.sim.api, fences: n.fences }]));
  expect(r.wiring.nodes).toBeInstanceOf(LocalNodes);
  expect(r.wiring.feed).toBeInstanceOf(InProcessFeed);
  expect(r.wiring.configOrigin).toBeInstanceOf(FilesConfig);
  expect(r.nodeMessage).toBe(true);
  expect(r.cordonEvent).toBe(true);
  expect(r.inForce).toBe(0.5);
  expect(r.files).toContain('paused_resource_release_ratio: 0.5');
}, 60_000);

it('a cluster replica: the store feed leaves events to the tick, and a config set goes to the store, not the files', async () => {
  const r = await cordonAndSet('wiring-cluster', (n) => clusterControl(n.store, 'secret', () => 30_000));
  expect(r.wiring.nodes).toBeInstanceOf(RemoteNodes);
  expect(r.wiring.feed).toBeInstanceOf(StoreFeed);
  expect(r.wiring.configOrigin).toBeInstanceOf(StoreConfig);
  // The node's own message is this replica's answer, the same in both wirings.
  expect(r.nodeMessage).toBe(true);
  expect(r.cordonEvent).toBe(false);
  expect(r.inForce).toBe(0.5);
  expect(r.files).toMatch(/paused_resource_release_ratio: 0 /);
}, 60_000);
