// Role all is a cluster of one: its control plane reaches the in-process node through
// LocalNodes (wiring.ts inProcessControl), and lock fences are checked there as node RPC checks them on a compute node. A
// holder whose lease lapsed (this process stalled past it) cannot act after the next holder did.
import { afterEach, expect, it } from 'vitest';
import { HeartbeatSender } from '../../src/cubelet/heartbeat.js';
import { CubeError } from '../../src/errors.js';
import { ControlPlaneService } from '../../src/control/service.js';
import { inProcessControl } from '../../src/control/wiring.js';
import { soloNode } from '../helpers/solo.js';

const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

it('the in-process node refuses a call under a lapsed lock once the next holder reached it (130491), as a compute node does', async () => {
  const { config, log, store, sim, fences } = await soloNode('local-fences', cleanups);
  const node = sim.api;
  // Wired as daemon.ts runAll wires it.
  const wiring = inProcessControl([{ node, fences }]);
  const { nodes } = wiring;
  const cp = new ControlPlaneService({ store, config, log, replicaID: 'local', ...wiring });
  await cp.start();
  cleanups.push(() => cp.stop());
  const heartbeat = new HeartbeatSender({ nodes: [{ node, address: 'in-process' }], to: { local: (b) => cp.heartbeats(b.heartbeats, true) }, log });
  expect(await heartbeat.beat()).toBe(true);

  const { sandboxID } = await cp.createSandbox({ templateID: 'host' });
  // An operation takes the sandbox's lock, then stalls past its lease (a GC pause, a frozen VM).
  const stale = await store.acquireLock(sandboxID, 50);
  expect(stale).toBeDefined();
  await new Promise((r) => setTimeout(r, 100));
  // Meanwhile the next operation changes the sandbox under a newer lock: its fence reaches the node.
  await cp.setTimeout(sandboxID, 300);
  // The stalled holder wakes up and calls the node with its old fence: refused, the sandbox stays.
  const late = await nodes
    .node('local', undefined, stale)
    .destroySandbox(sandboxID)
    .then(
      () => undefined,
      (e: unknown) => e,
    );
  expect(late).toBeInstanceOf(CubeError);
  expect((late as CubeError).code).toBe(130491);
  expect(await node.getSandbox(sandboxID)).toMatchObject({ sandboxID });
  // The control plane's own calls go on (and a destroy forgets the sandbox's fence).
  await cp.destroySandbox(sandboxID);
  expect(await node.getSandbox(sandboxID)).toBeUndefined();
}, 60_000);
