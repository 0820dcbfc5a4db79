// A control replica and ONE compute process standing for 50 SIMULATED nodes (--runtime sim
// --sim-nodes 50): they register with their varied capacity through one batched heartbeat,
// placements spread over them, and once every node is at its sandbox cap a create fails with
// 130597 naming each node and the filter that refused it.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { NodeView, SandboxView } from '../../src/api/types.js';
import { startCluster, until, type TestCluster } from '../helpers/cluster.js';

const NODES = 50;
const CAP = 2;
let c: TestCluster;

beforeAll(async () => {
  c = await startCluster({ computes: 0, controls: 1, sim: { nodes: NODES, prefix: 'simt-' }, master: { scheduler: { node_max_mvm_num: CAP } } });
}, 180_000);

afterAll(async () => {
  await c?.stop();
}, 120_000);

const create = () => c.api<SandboxView & { code?: number; message?: string }>(0, '/admin/v1/sandboxes', { body: { templateID: 'host', timeoutSec: 600 } });

describe('50 simulated nodes in one process', () => {
  it('register healthy, with varied capacity, as runtime sim', async () => {
    const nodes = await until(
      '50 healthy sim nodes',
      async () => {
        const n = (await c.api<NodeView[]>(0, '/admin/v1/nodes')).body.filter((v) => v.nodeID.startsWith('simt-') && v.healthy);
        return n.length === NODES ? n : undefined;
      },
      60_000,
    );
    expect(new Set(nodes.map((n) => n.runtime))).toEqual(new Set(['sim']));
    expect(new Set(nodes.map((n) => n.capacity.cpus)).size).toBeGreaterThan(3);
    expect(new Set(nodes.map((n) => n.capacity.memoryMiB)).size).toBeGreaterThan(3);
  });

  it('spreads placements, and when every node is at its cap the create fails with 130597 listing every node', async () => {
    // One at a time: a refusal then means every node really is full (views lag only towards "emptier").
    const placed: string[] = [];
    let refusal: { status: number; code?: number; message?: string } | undefined;
    for (let k = 0; k < NODES * CAP * 2 && !refusal; k++) {
      const r = await create();
      if (r.status === 201 || r.status === 200) placed.push(r.body.nodeID);
      else refusal = { status: r.status, code: r.body.code, message: r.body.message };
    }
    const perNode = new Map<string, number>();
    for (const n of placed) perNode.set(n, (perNode.get(n) ?? 0) + 1);
    // Exactly CAP on every node: the control counts its own placements until the node's
    // heartbeat shows them, so nothing piles onto the nodes that looked emptiest a second ago.
    expect(perNode.size).toBe(NODES);
    expect(Math.max(...perNode.values())).toBe(CAP);
    expect(placed.length).toBe(NODES * CAP);
    expect(refusal).toMatchObject({ status: 503, code: 130597 });
    for (let i = 0; i < NODES; i++) expect(refusal!.message).toMatch(new RegExp(`simt-${String(i).padStart(4, '0')}: sandboxes \\d+ >= ${CAP}`));
    const events = (await c.api<{ kind: string; code?: number; message: string }[]>(0, '/admin/v1/events?limit=50')).body;
    expect(events.some((e) => e.kind === 'schedule.failed' && e.code === 130597 && e.message.includes('simt-0049'))).toBe(true);
  }, 120_000);

  it('refuses port traffic to a simulated sandbox (it has no network) with a clear error', async () => {
    const sb = (await c.api<SandboxView[]>(0, '/admin/v1/sandboxes')).body[0]!;
    const res = await fetch(`${c.controls[0]!.url}/index.html`, { headers: { 'e2b-sandbox-id': sb.sandboxID, 'e2b-sandbox-port': '8000' } });
    expect(res.status).toBe(409);
    expect(((await res.json()) as { message: string }).message).toMatch(/is simulated .*no network/);
  });
});
