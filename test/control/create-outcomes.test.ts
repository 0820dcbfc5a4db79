// One known outcome for every create (design.md section 8), through the real e2b SDK, over role
// all wired in-process as daemon.ts runAll wires it (the embedded store, a simulated node). The
// node's creates can be held at a gate, so a client gives up, or repeats itself, while its
// create is under way, as it does when a node is slow. The cluster cases (another replica, a
// replica killed, a node frozen) are in test/cluster/outcomes.test.ts.
import { request } from 'node:http';
import { Sandbox, SandboxError } from 'e2b';
import { afterAll, beforeAll, beforeEach, expect, it } from 'vitest';
import type { ControlPlaneService } from '../../src/control/service.js';
import type { HeartbeatSender } from '../../src/cubelet/heartbeat.js';
import type { NodeApi, NodeCreateRequest } from '../../src/cubelet/types.js';
import type { EventView } from '../../src/model/event.js';
import { CubeError } from '../../src/errors.js';
import type { EmbeddedStore } from '../../src/store/embedded.js';
import { until } from '../helpers/cluster.js';
import { soloApi, soloNode } from '../helpers/solo.js';

const API_KEY = 'e2b_create_outcomes_test';
const cleanups: (() => Promise<void> | void)[] = [];
let node: NodeApi;
let store: EmbeddedStore;
let cp: ControlPlaneService;
let opts: { apiKey: string; apiUrl: string; sandboxUrl: string };
/** Creates the node was asked for. */
let creates: NodeCreateRequest[] = [];
/** While set, the node's creates wait for it. */
let gate: Promise<void> | undefined;
let openGate = (): void => undefined;

function closeGate(): void {
  gate = new Promise((r) => (openGate = r));
}

/** The node as the control plane reaches it: creates counted, and held while the gate is closed. */
function gated(n: NodeApi): NodeApi {
  return new Proxy(n, {
    get(target, prop, receiver) {
      const value: unknown = Reflect.get(target, prop, receiver);
      if (prop !== 'createSandbox' || typeof value !== 'function') return typeof value === 'function' ? value.bind(target) : value;
      return async (req: NodeCreateRequest) => {
        creates.push(req);
        await gate;
        return (value as NodeApi['createSandbox']).call(target, req);
      };
    },
  });
}

beforeAll(async () => {
  const solo = await soloNode('create-outcomes', cleanups);
  node = solo.sim.api;
  store = solo.store;
  let heartbeat: HeartbeatSender;
  ({ cp, heartbeat, opts } = await soloApi(solo, gated(node), API_KEY, cleanups, 200));
  // The node reports every second, as the daemon's does (a silent node is marked lost).
  const beats = setInterval(() => void heartbeat.beat(), 1000);
  cleanups.push(() => clearInterval(beats));
}, 60_000);

afterAll(async () => {
  openGate();
  for (const s of await node.listSandboxes()) await node.destroySandbox(s.sandboxID).catch(() => undefined);
  for (const c of cleanups.splice(0).reverse()) await c();
});

beforeEach(async () => {
  openGate();
  gate = undefined;
  creates = [];
  for (const s of await cp.listSandboxes()) await cp.destroySandbox(s.sandboxID);
});

const events = async (sandboxID: string): Promise<EventView[]> => (await cp.events({ limit: 1000 })).filter((e) => e.sandboxID === sandboxID);

it('a create with an idempotency key, as the metadata label or the header, returns the same sandbox however often it is repeated', async () => {
  const a = await Sandbox.create({ ...opts, metadata: { 'cube.idempotency_key': 'rollout-1' } });
  const b = await Sandbox.create({ ...opts, metadata: { 'cube.idempotency_key': 'rollout-1' } });
  expect(b.sandboxId).toBe(a.sandboxId);
  const h1 = await Sandbox.create({ ...opts, apiHeaders: { 'Idempotency-Key': 'rollout-2' } });
  const h2 = await Sandbox.create({ ...opts, apiHeaders: { 'Idempotency-Key': 'rollout-2' } });
  expect(h2.sandboxId).toBe(h1.sandboxId);
  expect(h1.sandboxId).not.toBe(a.sandboxId);
  // Once deleted, the key says so rather than making a second sandbox for the same create.
  await a.kill();
  const again = await Sandbox.create({ ...opts, metadata: { 'cube.idempotency_key': 'rollout-1' } }).then(
    () => 'created',
    (e: Error) => e.message,
  );
  expect(again).toMatch(/idempotency key made sandbox .* which was deleted since/);
  expect(creates.length).toBe(2);
  expect((await cp.listSandboxes()).map((s) => s.sandboxID)).toEqual([h1.sandboxId]);
}, 60_000);

it('concurrent creates with one key: one create on the node, every caller gets its sandbox', async () => {
  closeGate();
  const all = Array.from({ length: 5 }, () => Sandbox.create({ ...opts, metadata: { 'cube.idempotency_key': 'burst' } }));
  await until('the first create reached the node', async () => (creates.length > 0 ? true : undefined), 10_000);
  openGate();
  const made = await Promise.all(all);
  expect(new Set(made.map((s) => s.sandboxId)).size).toBe(1);
  expect(creates.length).toBe(1);
  expect((await node.listSandboxes()).map((s) => s.sandboxID)).toEqual([made[0]!.sandboxId]);
}, 60_000);

it('a refused create with a key gets the same refusal when repeated, whatever the repeat asks', async () => {
  const refusal = (template: string) =>
    Sandbox.create(template, { ...opts, metadata: { 'cube.idempotency_key': 'refused' } }).then(
      () => undefined,
      (e: Error) => e,
    );
  const first = await refusal('no-such-template');
  // The key names the create: a repeat is the same create, not a new one with other arguments.
  const second = await refusal('host');
  expect(first).toBeInstanceOf(SandboxError);
  expect(first!.message).toMatch(/^404: 130404 template no-such-template not found/);
  expect([second?.name, second?.message]).toEqual([first!.name, first!.message]);
  expect(creates.length).toBe(0);
}, 60_000);

it('a create whose client left before the answer is undone, with an event saying why; with a key it stays for the key to adopt', async () => {
  closeGate();
  // The client goes (its process killed, its connection closed) while the node holds the create.
  await leaveMidCreate({ templateID: 'host' }, 1);
  const abandoned = creates[0]!.sandboxID;
  openGate();
  await until(
    'the abandoned create undone',
    async () => ((await node.getSandbox(abandoned)) === undefined && (await store.getSandbox(abandoned)) === undefined ? true : undefined),
    10_000,
  );
  expect((await events(abandoned)).map((e) => e.message)).toContainEqual(expect.stringMatching(/undone: the client closed its connection before the answer/));
  expect(await store.wasDeleted(abandoned)).toBe(true);

  closeGate();
  await leaveMidCreate({ templateID: 'host', metadata: { 'cube.idempotency_key': 'left' } }, 2);
  openGate();
  const adopted = await Sandbox.create({ ...opts, metadata: { 'cube.idempotency_key': 'left' } });
  expect(adopted.sandboxId).toBe(creates[1]!.sandboxID);
  expect(creates.length).toBe(2);
  expect(await node.getSandbox(adopted.sandboxId)).toMatchObject({ state: 'running' });
}, 60_000);

/** POSTs an E2B create and closes the connection once the node has its `nth` create. */
async function leaveMidCreate(body: unknown, nth: number): Promise<void> {
  const req = request(`${opts.apiUrl}/sandboxes`, { method: 'POST', headers: { 'x-api-key': API_KEY, 'content-type': 'application/json' } });
  const closed = new Promise<void>((r) => req.once('close', () => r()));
  req.on('error', () => undefined);
  req.end(JSON.stringify(body));
  await until('the create reached the node', async () => (creates.length === nth ? true : undefined), 10_000);
  req.destroy();
  await closed;
}

it("a record left `creating` past its create's deadline by a creator that went is settled from the node's truth within seconds", async () => {
  const past = Date.now() - 1000;
  const base = {
    templateID: 'host',
    nodeID: 'local',
    state: 'creating' as const,
    spec: { cpus: 1, memoryMiB: 256, diskGiB: 1 },
    metadata: {},
    startedAt: past - 10_000,
    endAt: past + 600_000,
    runtime: 'sim',
    accessToken: 't',
    envVars: {},
    createBy: past,
  };
  // Nothing was made (the create failed while the store was away and could not remove its record).
  await store.putSandbox({ ...base, sandboxID: 'sbxstalenone00000000' });
  // Made on the node, without a key: nobody will ever hear of it.
  const orphan = await node.createSandbox({
    sandboxID: 'sbxstaleorphan000000',
    templateID: 'host',
    cpus: 1,
    memoryMiB: 256,
    diskGiB: 1,
    endAt: past + 600_000,
    env: {},
    metadata: {},
  });
  await store.putSandbox({ ...base, sandboxID: orphan.sandboxID });
  // Made on the node, with a key: the key's next create finds it running.
  const kept = await node.createSandbox({
    sandboxID: 'sbxstalekeyed0000000',
    templateID: 'host',
    cpus: 1,
    memoryMiB: 256,
    diskGiB: 1,
    endAt: past + 600_000,
    env: {},
    metadata: {},
  });
  await store.putSandbox({ ...base, sandboxID: kept.sandboxID, keyed: true });
  await until('no record creating', async () => ((await store.listSandboxes({ state: ['creating'] })).length === 0 ? true : undefined), 15_000);
  expect(await store.getSandbox('sbxstalenone00000000')).toBeUndefined();
  expect(await store.getSandbox(orphan.sandboxID)).toBeUndefined();
  expect(await node.getSandbox(orphan.sandboxID)).toBeUndefined();
  expect(await store.getSandbox(kept.sandboxID)).toMatchObject({ state: 'running' });
  expect((await events(orphan.sandboxID)).map((e) => e.message)).toContainEqual(expect.stringMatching(/undone: its control replica went before answering/));
  expect((await events('sbxstalenone00000000')).map((e) => e.message)).toContainEqual(expect.stringMatching(/undone: it did not finish by its deadline/));
}, 60_000);

it('a create whose record write failed after the record landed (MySQL committed, Redis did not) leaves no creating record behind', async () => {
  // The cluster store writes MySQL, then the Redis route: Redis failing in between answers an error
  // for a record that exists. Injected here on the embedded store, which has no such split.
  const real = store.putSandbox.bind(store);
  let written: string | undefined;
  store.putSandbox = async (rec) => {
    await real(rec);
    written = rec.sandboxID;
    throw new CubeError('STATE_UNAVAILABLE', 'Redis unavailable: injected after the record was written', { retryAfter: 1 });
  };
  try {
    const refused = await Sandbox.create({ ...opts }).then(
      () => undefined,
      (e: Error) => e,
    );
    expect(refused?.message).toMatch(/Redis unavailable: injected/);
  } finally {
    store.putSandbox = real;
  }
  expect(written).toBeDefined();
  expect(await store.getSandbox(written!)).toBeUndefined();
  expect(creates.length).toBe(0);
}, 60_000);
