// A process standing for many simulated nodes takes no view and no list for a heartbeat of a
// node that stood still (stateVersion), and still reports every change of either: after each
// change the control's copy (the last view and list the heartbeats carried) is what the node
// answers now. A node without stateVersion (a real one) is read on every heartbeat.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ConfigStore } from '../../src/config/store.js';
import { HeartbeatSender } from '../../src/cubelet/heartbeat.js';
import type { Heartbeat, HeartbeatAnswer } from '../../src/cubelet/rpc-wire.js';
import { simNode, type SimNode } from '../../src/cubelet/sim-nodes.js';
import type { NodeApi } from '../../src/cubelet/types.js';
import { newSandboxID } from '../../src/ids.js';
import type { NodeView } from '../../src/model/node.js';
import type { SandboxView } from '../../src/model/sandbox.js';

const log = pino({ level: 'silent' });
let dir: string;
let config: ConfigStore;
let node: SimNode;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'cube-hb-still-'));
  config = new ConfigStore(join(dir, 'config'), { watch: false });
  node = simNode({
    nodeID: 'cube-hbs-n1',
    dataDir: join(dir, 'node'),
    config: () => config.config,
    log,
    spec: { nodeID: 'cube-hbs-n1', cpus: 16, memoryMiB: 32768, templates: ['host'] },
  });
  await node.cubelet.start();
});

afterAll(async () => {
  await node?.cubelet.stop({ destroy: true });
  config?.close();
  rmSync(dir, { recursive: true, force: true });
});

/** The node as the heartbeat sees it, counting the views built and lists taken. */
function counted(n: NodeApi): { node: NodeApi; reads: { views: number; lists: number } } {
  const reads = { views: 0, lists: 0 };
  const node = new Proxy(n, {
    get(target, key) {
      const v = Reflect.get(target, key) as unknown;
      if (key === 'nodeView') reads.views++;
      if (key === 'listSandboxes') reads.lists++;
      return v;
    },
  });
  return { node, reads };
}

/** A control that keeps the last view and list each node's heartbeats carried; `refuse` turns the next heartbeats away. */
function control() {
  const held: { view?: NodeView; list?: SandboxView[]; last?: Heartbeat } = {};
  const c = {
    held,
    refuse: false,
    answer: {} as Partial<HeartbeatAnswer>,
    local: async (batch: { heartbeats: Heartbeat[] }): Promise<HeartbeatAnswer> => {
      if (c.refuse) throw new Error('refused');
      const hb = batch.heartbeats[0]!;
      held.last = hb;
      if (hb.view) held.view = hb.view;
      if (hb.sandboxes) held.list = hb.sandboxes;
      return { ok: true, ...c.answer };
    },
  };
  return c;
}

const unstamped = ({ lastSeen: _, ...v }: NodeView) => v;
const create = (sandboxID: string) =>
  node.api.createSandbox({ sandboxID, templateID: 'host', cpus: 1, memoryMiB: 256, diskGiB: 1, endAt: Date.now() + 600_000, env: {}, metadata: {} });

describe('heartbeats of a node that stands still', () => {
  it('take no view and no list while nothing changed, yet say the node is alive', async () => {
    const { node: counting, reads } = counted(node.api);
    const c = control();
    const sender = new HeartbeatSender({ nodes: [{ node: counting, address: 'http://127.0.0.1:1' }], to: { local: c.local }, log });
    expect(await sender.beat()).toBe(true);
    expect(c.held.last?.view).toBeDefined();
    const before = { ...reads };
    expect(await sender.beat()).toBe(true);
    expect(await sender.beat()).toBe(true);
    expect(reads).toEqual(before); // the old sender built a view and took a list on every beat
    expect(c.held.last?.view).toBeUndefined();
    expect(c.held.last?.sandboxes).toBeUndefined();
    expect(c.held.last?.seen?.lastSeen).toBeDefined();
  });

  it('every change reaches the next heartbeat: nothing the control holds is stale', async () => {
    const c = control();
    const sender = new HeartbeatSender({ nodes: [{ node: node.api, address: 'http://127.0.0.1:1' }], to: { local: c.local }, log, config });
    const current = async () => {
      expect(await sender.beat()).toBe(true);
      expect(unstamped(c.held.view!)).toEqual(
        unstamped({ ...(await node.api.nodeView()), ...(c.held.view?.configVersion !== undefined ? { configVersion: c.held.view.configVersion } : {}) }),
      );
      expect(c.held.list).toEqual(await node.api.listSandboxes());
    };
    await current();
    const [a, b] = [newSandboxID(), newSandboxID()];
    await create(a);
    await current();
    expect(c.held.view?.sandboxes.running).toBe(1);
    await create(b);
    await current();
    await node.api.setEndAt(b, Date.now() + 1_200_000); // the list alone changes
    await current();
    expect(c.held.list?.find((s) => s.sandboxID === b)?.endAt).toBe((await node.api.getSandbox(b))?.endAt);
    await node.api.pauseSandbox(a);
    await current();
    expect(c.held.view?.sandboxes.paused).toBe(1);
    await node.api.resumeSandbox(a);
    await current();
    await node.api.destroySandbox(b);
    await current();
    expect(c.held.list?.map((s) => s.sandboxID)).toEqual([a]);
    // The cluster's config (another default spec): the view's density and its config version change.
    const master = {
      ...config.config.master,
      sandbox: { ...config.config.master.sandbox, default_spec: { ...config.config.master.sandbox.default_spec, cpus: 4 } },
    };
    const before = c.held.view!.density.cpuCeiling;
    c.answer = { config: { version: 7, master } };
    expect(await sender.beat()).toBe(true); // the answer puts it in force after this heartbeat
    c.answer = {};
    await current();
    expect(c.held.view?.configVersion).toBe(7);
    expect(c.held.view!.density.cpuCeiling).toBeLessThan(before);
    await node.api.destroySandbox(a);
    await current();
    expect(c.held.view?.sandboxes.total).toBe(0);
  });

  it('after refused heartbeats the next accepted one carries the view and the list again', async () => {
    const c = control();
    const sender = new HeartbeatSender({ nodes: [{ node: node.api, address: 'http://127.0.0.1:1' }], to: { local: c.local }, log });
    expect(await sender.beat()).toBe(true);
    c.refuse = true;
    expect(await sender.beat()).toBe(false);
    c.refuse = false;
    expect(await sender.beat()).toBe(true);
    expect(c.held.last?.view).toBeDefined();
    expect(c.held.last?.sandboxes).toEqual([]);
  });

  it('a node without stateVersion (a real node) is read on every heartbeat', async () => {
    const { node: counting, reads } = counted(node.cubelet);
    const sender = new HeartbeatSender({ nodes: [{ node: counting, address: 'http://127.0.0.1:1' }], to: { local: control().local }, log });
    expect(await sender.beat()).toBe(true);
    expect(await sender.beat()).toBe(true);
    expect(reads).toEqual({ views: 2, lists: 2 });
  });
});
