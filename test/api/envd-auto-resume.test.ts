// envd traffic of an autoResume sandbox (src/api/envd/index.ts): admitted on the sandbox's
// record, with no read of its state from the node per request (that was one more node call per
// command, an RPC in a cluster). The record lags the node by up to a heartbeat: a command right
// after the sandbox's timeout paused it on the node, with the record still `running`, is refused
// by the node (130409), and then resumes the sandbox and runs. Wired as daemon.ts runAll wires
// role all, over a simulated node whose calls are counted; heartbeats are sent by the test only,
// so the record keeps lagging for as long as the test needs.
import { Sandbox } from 'e2b';
import { afterAll, beforeAll, expect, it } from 'vitest';
import type { HeartbeatSender } from '../../src/cubelet/heartbeat.js';
import type { NodeApi } from '../../src/cubelet/types.js';
import type { ControlPlaneService } from '../../src/control/service.js';
import { soloApi, soloNode } from '../helpers/solo.js';

const API_KEY = 'e2b_envd_auto_resume_test';
const cleanups: (() => Promise<void> | void)[] = [];
let node: NodeApi;
let cp: ControlPlaneService;
let heartbeat: HeartbeatSender;
let opts: { apiKey: string; apiUrl: string; sandboxUrl: string };
/** Calls the control plane and envd made to the node, by method. */
const calls = new Map<string, number>();

/** The node as the control plane reaches it, counting every call. */
function counted(n: NodeApi): NodeApi {
  return new Proxy(n, {
    get(target, prop, receiver) {
      const value: unknown = Reflect.get(target, prop, receiver);
      if (typeof value !== 'function' || typeof prop !== 'string') return value;
      return (...args: unknown[]) => {
        calls.set(prop, (calls.get(prop) ?? 0) + 1);
        return value.apply(target, args) as unknown;
      };
    },
  });
}

beforeAll(async () => {
  const solo = await soloNode('envd-auto-resume', cleanups);
  node = solo.sim.api;
  ({ cp, heartbeat, opts } = await soloApi(solo, counted(node), API_KEY, cleanups));
}, 60_000);

afterAll(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

// The simulated node runs no shell (the SDK's commands.run is `bash -l -c`): envd's file routes
// are the requests here; test/e2b/sdk.test.ts runs commands through the same path on a real node.
it('requests to a running autoResume sandbox read nothing from the node but what they ask', async () => {
  const { sandboxID } = await cp.createSandbox({ templateID: 'host', timeoutSec: 600, lifecycle: { onTimeout: 'pause', autoResume: true } });
  const sbx = await Sandbox.connect(sandboxID, opts);
  await sbx.files.write('/tmp/state', 'kept');
  calls.clear();
  for (let i = 0; i < 3; i++) expect(await sbx.files.read('/tmp/state')).toBe('kept');
  expect(calls.get('getSandbox') ?? 0).toBe(0);
  expect(calls.get('readFile')).toBe(3);
  await cp.destroySandbox(sandboxID);
}, 60_000);

it('a request right after the timeout paused an autoResume sandbox, its record still running, resumes it and is served', async () => {
  const { sandboxID } = await cp.createSandbox({ templateID: 'host', timeoutSec: 600, lifecycle: { onTimeout: 'pause', autoResume: true } });
  const sbx = await Sandbox.connect(sandboxID, opts);
  await sbx.files.write('/tmp/state', 'kept');
  // The node pauses it, as its timeout does; no heartbeat tells the control plane.
  await node.pauseSandbox(sandboxID);
  expect((await cp.getSandbox(sandboxID)).state).toBe('running');
  calls.clear();
  expect(await sbx.files.read('/tmp/state')).toBe('kept');
  // The download's first node call was refused, the sandbox resumed, the call made again.
  expect(calls.get('readFile')).toBe(2);
  expect(calls.get('resumeSandbox')).toBe(1);
  expect((await node.getSandbox(sandboxID))?.state).toBe('running');
  expect((await cp.getSandbox(sandboxID)).state).toBe('running');
  await cp.destroySandbox(sandboxID);
}, 60_000);

it("a sandbox without autoResume that its node paused is not resumed by a request: the node's refusal is answered", async () => {
  const { sandboxID } = await cp.createSandbox({ templateID: 'host', timeoutSec: 600, lifecycle: { onTimeout: 'pause', autoResume: false } });
  const sbx = await Sandbox.connect(sandboxID, opts);
  await node.pauseSandbox(sandboxID);
  calls.clear();
  await expect(sbx.files.read('/tmp/state')).rejects.toThrow(/paused; resume it first/);
  expect(calls.get('resumeSandbox') ?? 0).toBe(0);
  expect((await node.getSandbox(sandboxID))?.state).toBe('paused');
  await cp.destroySandbox(sandboxID);
}, 60_000);
