// A node's heartbeats against two control replicas over one Redis + MariaDB: the view and the
// sandbox list travel only when they changed (the control keeps the rest and asks for what it
// lost), and a heartbeat sent again after its answer was lost (the first replica ingested it)
// appends its notices once.
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { clusterRpcHandler } from '../../src/api/cluster-rpc.js';
import { ConfigStore } from '../../src/config/store.js';
import { HeartbeatSender } from '../../src/cubelet/heartbeat.js';
import type { Heartbeat, HeartbeatAnswer } from '../../src/cubelet/rpc-wire.js';
import { newSandboxID } from '../../src/ids.js';
import { simNode, type SimNode } from '../../src/cubelet/sim-nodes.js';
import { ControlPlaneService } from '../../src/control/service.js';
import { clusterControl } from '../../src/control/wiring.js';
import { ClusterStore } from '../../src/store/cluster/index.js';
import { clusterStateScope, type ClusterStateScope } from '../helpers/cluster-state.js';

const SECRET = 'heartbeat-delta-secret';
const [S1, S2, S3] = [newSandboxID(), newSandboxID(), newSandboxID()];
const log = pino({ level: 'silent' });

let dir: string;
let scope: ClusterStateScope;
let store: ClusterStore;
let config: ConfigStore;
let node: SimNode;
const servers: Server[] = [];
/** Every batch each replica got, and whether its answer is to be lost. */
const seen: { a: Heartbeat[][]; b: Heartbeat[][] } = { a: [], b: [] };
let loseAnswersOfA = false;

async function replica(name: 'a' | 'b'): Promise<string> {
  const cp = new ControlPlaneService({ store, config, log, replicaID: `hb-${name}`, ...clusterControl(store, SECRET, () => 30_000) });
  const handler = clusterRpcHandler(
    {
      heartbeats: async (hbs): Promise<HeartbeatAnswer> => {
        seen[name].push(hbs);
        const answer = await cp.heartbeats(hbs);
        // Ingested, but the node never hears it: it sends the same heartbeat again (to B).
        if (name === 'a' && loseAnswersOfA) throw new Error('answer lost');
        return answer;
      },
    },
    SECRET,
  );
  const server = createServer(handler);
  servers.push(server);
  await new Promise<void>((ok) => server.listen(0, '127.0.0.1', ok));
  return `http://127.0.0.1:${(server.address() as { port: number }).port}`;
}

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'cube-hb-delta-'));
  scope = clusterStateScope();
  store = new ClusterStore({ redisURL: scope.redisURL, mysqlURL: scope.mysqlURL, keyPrefix: scope.keyPrefix });
  await store.init();
  config = new ConfigStore(join(dir, 'config'), { watch: false });
  node = simNode({ nodeID: 'cube-hbd-n1', dataDir: join(dir, 'node'), config: () => config.config, log });
  await node.cubelet.start();
});

afterAll(async () => {
  await node?.cubelet.stop({ destroy: true }).catch(() => undefined);
  for (const s of servers) await new Promise((r) => s.close(r));
  await store?.close();
  await scope?.drop();
  config?.close();
  rmSync(dir, { recursive: true, force: true });
});

const create = (sandboxID: string) =>
  node.api.createSandbox({ sandboxID, templateID: 'host', cpus: 1, memoryMiB: 256, diskGiB: 1, endAt: Date.now() + 600_000, env: {}, metadata: {} });

describe('heartbeats against two replicas', () => {
  it('send the view and the list only when they change; a lost view is asked for and sent again', async () => {
    const a = await replica('a');
    const sender = new HeartbeatSender({ nodes: [{ node: node.api, address: 'http://127.0.0.1:1' }], to: { controls: [a], secret: SECRET }, log });
    expect(await sender.beat()).toBe(true);
    expect(await sender.beat()).toBe(true);
    const [first, second] = seen.a.map((b) => b[0]!);
    expect(first!.view?.nodeID).toBe('cube-hbd-n1');
    expect(first!.sandboxes).toEqual([]);
    // Nothing changed: liveness only, and the control's copy of the view says when.
    expect(second!.view).toBeUndefined();
    expect(second!.sandboxes).toBeUndefined();
    expect(second!.seen?.lastSeen).toBeDefined();
    expect((await store.getNodeMetrics(['cube-hbd-n1'])).get('cube-hbd-n1')?.lastSeen).toBe(second!.seen!.lastSeen);

    await create(S1);
    expect(await sender.beat()).toBe(true);
    const third = seen.a.at(-1)![0]!;
    expect(third.view?.sandboxes.total).toBe(1);
    expect(third.sandboxes?.map((s) => s.sandboxID)).toEqual([S1]);

    // The store lost the view (as after a Redis restart): the replica asks, the node sends it again.
    await store.live.redis.del(`${scope.keyPrefix}master:node:metric:cube-hbd-n1`);
    expect(await sender.beat()).toBe(true);
    expect(seen.a.at(-1)![0]!.view).toBeUndefined();
    expect(await sender.beat()).toBe(true);
    expect(seen.a.at(-1)![0]!.view?.sandboxes.total).toBe(1);
    expect((await store.getNodeMetrics(['cube-hbd-n1'])).get('cube-hbd-n1')?.sandboxes.total).toBe(1);
  });

  it('a heartbeat whose answer was lost is sent again to the other replica; its notices are appended once', async () => {
    const [a, b] = [await replica('a'), await replica('b')];
    const sender = new HeartbeatSender({
      nodes: [{ node: node.api, address: 'http://127.0.0.1:1' }],
      to: { controls: [a, b], secret: SECRET },
      log,
      intervalMs: 3_600_000,
    });
    const [aBefore, bBefore] = [seen.a.length, seen.b.length];
    // Subscribed to the node's notices from here; the first heartbeat goes at once.
    sender.start();
    try {
      await vi.waitFor(() => expect(seen.a.length).toBeGreaterThan(aBefore), { timeout: 10_000 });
      const since = (await store.listEvents({ limit: 1 }))[0]?.id ?? 0;
      loseAnswersOfA = true;
      await create(S2);
      expect(await sender.beat()).toBe(true);
      const carried = (batches: Heartbeat[][]) => batches.flatMap((hbs) => hbs.flatMap((hb) => hb.events)).filter((e) => e.sandboxID === S2).length;
      expect(carried(seen.a.slice(aBefore))).toBe(1);
      expect(carried(seen.b.slice(bBefore))).toBe(1);
      // The node's notice once (the replica also adopts the sandbox, which has no record: a notice of its own, behind the answer).
      await vi.waitFor(
        async () => {
          const appended = (await store.listEvents({ sinceID: since, limit: 1000 })).filter((e) => e.sandboxID === S2 && e.kind === 'sandbox.created');
          expect(appended.map((e) => e.message)).toEqual(['created from host', expect.stringContaining('adopted from node')]);
        },
        { timeout: 10_000 },
      );
    } finally {
      loseAnswersOfA = false;
      await sender.stop();
    }
  });

  it('a create whose replica died between its MySQL and Redis writes is settled by the next list', async () => {
    // What a replica's create wrote before kill -9: the pending record (MySQL and route), then,
    // with the node's answer, the running record in MySQL only.
    const pending = {
      sandboxID: S3,
      templateID: 'host',
      nodeID: node.api.nodeID,
      state: 'creating' as const,
      spec: { cpus: 1, memoryMiB: 256, diskGiB: 1 },
      metadata: {},
      startedAt: Date.now(),
      endAt: Date.now() + 600_000,
      runtime: 'ns',
      accessToken: 'tok',
      envVars: {},
    };
    const gen = await store.putSandbox(pending);
    const view = await create(S3);
    await store.mysql.putSandboxIf({ ...pending, ...view, nodeAt: Date.now() }, gen);
    // The survivor reconciles the node's list over the route: the record must follow the node.
    const cp = new ControlPlaneService({ store, config, log, replicaID: 'hb-survivor', ...clusterControl(store, SECRET, () => 30_000) });
    const hb: Heartbeat = {
      nodeID: node.api.nodeID,
      address: 'http://127.0.0.1:1',
      events: [],
      at: Date.now(),
      view: await node.api.nodeView(),
      sandboxes: await node.api.listSandboxes(),
    };
    await cp.heartbeats([hb]);
    // Before the fix its update was refused over the route's stale generation, with every list.
    await vi.waitFor(async () => expect(await store.getSandbox(S3)).toMatchObject({ state: 'running', accessToken: 'tok' }), { timeout: 10_000 });
  });
});
