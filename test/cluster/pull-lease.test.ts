// The pull-through cache's single flight on the real Redis + MariaDB (own prefix and database):
// of the nodes asking for an image digest no node holds, one gets the pull lease (it pulls), the
// others are told to wait; a release by anyone but its holder does nothing, its holder's release
// lets the next node pull, and a holder that stops renewing (killed mid-pull) loses it once it
// lapses. The lease is shortened here to 300 ms (PULL_LEASE_MS in the daemon).
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ClusterStore } from '../../src/store/cluster/index.js';
import { LayerRelay } from '../../src/templates/relay.js';
import { clusterStateScope, type ClusterStateScope } from '../helpers/cluster-state.js';

let scope: ClusterStateScope;
let store: ClusterStore;
let relay: LayerRelay;
const digest = `sha256:${'a'.repeat(64)}`;

beforeAll(async () => {
  scope = clusterStateScope();
  store = new ClusterStore(scope);
  await store.init();
  relay = new LayerRelay({
    // No node holds the image: every ask comes to the lease.
    nodes: () => Promise.resolve([]),
    secret: 'unused',
    noteTemplates: () => Promise.resolve(),
    registryHolders: () => Promise.resolve([]),
    lease: (name, nodeID, ttlMs) => (ttlMs ? store.holdLease(name, nodeID, 300) : store.releaseLease(name, nodeID)),
  });
});

afterAll(async () => {
  try {
    await store?.close();
  } finally {
    await scope?.drop();
  }
});

describe('the pull lease of an image digest', () => {
  it('one node pulls, the others wait; released by its holder only; lapses when not renewed', async () => {
    expect(await relay.image(digest, 'n1')).toEqual({ pull: true });
    expect(await relay.image(digest, 'n2')).toEqual({ wait: true });
    expect(await relay.image(digest, 'n1')).toEqual({ pull: true }); // asking again keeps it
    await relay.image(digest, 'n2', 'release'); // not n2's
    expect(await relay.image(digest, 'n2')).toEqual({ wait: true });
    await relay.image(digest, 'n1', 'release');
    expect(await relay.image(digest, 'n2')).toEqual({ pull: true });
    // n2 renews while its copy runs: still its own past the lease's first life.
    for (let i = 0; i < 3; i++) {
      await sleep(150);
      await relay.image(digest, 'n2', 'renew');
    }
    expect(await relay.image(digest, 'n3')).toEqual({ wait: true });
    // n2 killed: no renewal; the lease lapses and n3 pulls.
    await sleep(400);
    expect(await relay.image(digest, 'n3')).toEqual({ pull: true });
  });
});
