// The control plane's side of deaths (src/control/deaths.ts), fed heartbeats directly: a node's
// sandbox.died notice keeps a typed tombstone that the list's reconcile does not override; a
// sandbox a node comes back without gets node_lost when its node had been lost, vanished when
// nothing was said; a client's own delete leaves none.
import { join } from 'node:path';
import pino from 'pino';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ConfigStore } from '../../src/config/store.js';
import { clusterControl } from '../../src/control/wiring.js';
import { ControlPlaneService } from '../../src/control/service.js';
import type { Heartbeat } from '../../src/cubelet/rpc-wire.js';
import type { SandboxRecord } from '../../src/model/sandbox.js';
import { EmbeddedStore } from '../../src/store/embedded.js';
import { node } from '../scheduler/fixtures.js';
import { soloConfigDir, type Cleanups } from '../helpers/solo.js';

let cleanups: Cleanups;
let store: EmbeddedStore;
let cp: ControlPlaneService;

const rec = (id: string, over: Partial<SandboxRecord> = {}): SandboxRecord => ({
  sandboxID: id,
  templateID: 'base',
  nodeID: 'n1',
  state: 'running',
  spec: { cpus: 1, memoryMiB: 256, diskGiB: 1 },
  metadata: { run: id },
  startedAt: Date.now() - 60_000,
  endAt: Date.now() + 60_000,
  runtime: 'ns',
  owner: 'k1',
  accessToken: `t-${id}`,
  envVars: {},
  ...over,
});

const beat = (over: Partial<Heartbeat> = {}): Heartbeat => ({
  nodeID: 'n1',
  address: 'http://127.0.0.1:9',
  view: node('n1', { lastSeen: Date.now() }),
  sandboxes: [],
  events: [],
  sender: 'n1:test',
  at: Date.now(),
  ...over,
});

beforeEach(async () => {
  cleanups = [];
  const dir = soloConfigDir('deaths', cleanups);
  const config = new ConfigStore(dir, { watch: false });
  cleanups.push(() => config.close());
  store = new EmbeddedStore({ path: join(dir, 'cubed.db') });
  await store.init();
  cleanups.push(() => store.close());
  cp = new ControlPlaneService({
    store,
    config,
    log: pino({ level: 'silent' }),
    replicaID: 'r1',
    tickMs: 60_000,
    ...clusterControl(store, 'secret', () => 30_000),
  });
  await cp.start();
  cleanups.push(() => cp.stop());
});

afterEach(async () => {
  for (const c of cleanups.reverse()) await c();
});

describe('tombstones from the node feed', () => {
  it("a node's sandbox.died keeps its reason; the list that then lacks the sandbox does not change it", async () => {
    await store.putSandbox(rec('s1'));
    const at = Date.now();
    await cp.heartbeats(
      [
        beat({
          events: [{ seq: 1, at, kind: 'sandbox.died', nodeID: 'n1', sandboxID: 's1', code: 130411, death: 'timeout', message: 'timeout reached at x' }],
        }),
      ],
      true,
    );
    const err = await cp.getSandbox('s1').catch((e: unknown) => e);
    expect(err).toMatchObject({ code: 130411, http: 404, details: { reason: 'timeout', nodeID: 'n1', sandboxID: 's1' } });
    expect(await store.lifecycle.getTombstone('s1')).toMatchObject({ reason: 'timeout', at, templateID: 'base', metadata: { run: 's1' }, owner: 'k1' });
  });

  it('a record its node came back without: node_lost when the node had been lost, vanished otherwise', async () => {
    await store.putSandbox(rec('s2', { state: 'lost', reason: 'node n1 stopped heartbeating' }));
    await store.putSandbox(rec('s3'));
    await cp.heartbeats([beat()], true);
    await expect(cp.getSandbox('s2')).rejects.toMatchObject({ code: 130415, message: expect.stringContaining('ended: node_lost') });
    await expect(cp.getSandbox('s3')).rejects.toMatchObject({ code: 130419 });
    // A typed notice that comes late replaces vanished.
    await cp.heartbeats(
      [
        beat({
          events: [{ seq: 2, at: Date.now(), kind: 'sandbox.died', nodeID: 'n1', sandboxID: 's3', code: 130417, death: 'not_readopted', message: 'restarted' }],
        }),
      ],
      true,
    );
    await expect(cp.getSandbox('s3')).rejects.toMatchObject({ code: 130417 });
    const died = (await cp.events({ limit: 100 })).filter((e) => e.kind === 'sandbox.died');
    expect(died.map((e) => [e.sandboxID, e.death])).toEqual([
      ['s2', 'node_lost'],
      ['s3', 'vanished'],
      ['s3', 'not_readopted'],
    ]);
  });

  it('a record still creating that its node does not list is no death (its create answered)', async () => {
    await store.putSandbox(rec('s4', { state: 'creating', startedAt: Date.now() - 1000 }));
    await cp.heartbeats([beat()], true);
    await expect(cp.getSandbox('s4')).rejects.toMatchObject({ code: 130404 });
  });
});
