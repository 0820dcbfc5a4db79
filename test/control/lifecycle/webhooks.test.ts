// Lifecycle events and webhook deliveries across two control replicas on one Redis + MySQL: each
// event delivered once (the other replica's derive adds nothing, its claims skip what is being
// sent), retried with backoff after a failure, signed as E2B signs, and still delivered after the
// replica that queued it is gone (the queue and the cursor are in the store).
import { createHash } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ConfigStore } from '../../../src/config/store.js';
import type { ControlContext } from '../../../src/control/context.js';
import { Lifecycle } from '../../../src/control/lifecycle/index.js';
import { backoffMs, Deliverer, MAX_ATTEMPTS, signature } from '../../../src/control/lifecycle/webhooks.js';
import type { EventView } from '../../../src/model/event.js';
import { EmbeddedStore } from '../../../src/store/embedded.js';
import type { NodeDirectory } from '../../../src/control/node-directory.js';
import type { NodeFeed } from '../../../src/control/node-feed.js';
import { ClusterStore } from '../../../src/store/cluster/index.js';
import { clusterStateScope, type ClusterStateScope } from '../../helpers/cluster-state.js';

interface Received {
  headers: Record<string, string | string[] | undefined>;
  body: string;
  answered: number;
}

let scope: ClusterStateScope;
let stores: ClusterStore[] = [];
let receiver: Server;
let url: string;
const received: Received[] = [];
/** Answers 500 to the first POST of each event, 200 after. */
const seen = new Set<string>();

const log = pino({ level: 'silent' });

function replica(store: ClusterStore, replicaID: string): Lifecycle {
  const ctx: ControlContext = { store, cfg: {} as ConfigStore, log, replicaID, nodes: {} as NodeDirectory, feed: {} as NodeFeed };
  return new Lifecycle(ctx, async (e) => void (await store.appendEvent({ ...e, at: e.at ?? Date.now() })));
}

async function open(): Promise<ClusterStore> {
  const s = new ClusterStore({ redisURL: scope.redisURL, mysqlURL: scope.mysqlURL, keyPrefix: scope.keyPrefix });
  await s.init();
  stores.push(s);
  return s;
}

beforeAll(async () => {
  scope = clusterStateScope();
  receiver = createServer((req, res) => {
    let body = '';
    req.on('data', (c: Buffer) => (body += c.toString()));
    req.on('end', () => {
      const id = (JSON.parse(body) as { id: string }).id;
      const answered = seen.has(id) ? 200 : 500;
      seen.add(id);
      received.push({ headers: req.headers, body, answered });
      res.writeHead(answered).end();
    });
  });
  await new Promise<void>((r) => receiver.listen(0, '127.0.0.1', r));
  url = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/hook`;
});

afterAll(async () => {
  await new Promise((r) => receiver.close(r));
  await Promise.all(stores.map((s) => s.close()));
  await scope.drop();
});

describe('webhooks across replicas', () => {
  it('derives each event once, delivers it once per webhook (after one retry), signed; a new replica carries on', async () => {
    const store = await open();
    const [a, b] = [replica(store, 'r1'), replica(await open(), 'r2')];
    const hook = await a.createWebhook('k1', {
      name: 'h',
      url,
      enabled: true,
      events: ['sandbox.lifecycle.created', 'sandbox.lifecycle.killed'],
      signatureSecret: 'shh',
    });
    await a.createWebhook('k2', { name: 'other key', url, enabled: true, events: ['sandbox.lifecycle.created'], signatureSecret: 'x' });
    await store.putSandbox({
      sandboxID: 's1',
      templateID: 'base',
      nodeID: 'n1',
      state: 'running',
      spec: { cpus: 1, memoryMiB: 256, diskGiB: 1 },
      metadata: { run: '7' },
      startedAt: 1,
      endAt: 2,
      runtime: 'ns',
      owner: 'k1',
      accessToken: 't',
      envVars: {},
    });
    await store.appendEvent({ at: Date.now(), kind: 'sandbox.created', sandboxID: 's1', nodeID: 'n1', message: 'created from base' });
    await store.appendEvent({ at: Date.now(), kind: 'sandbox.timeout', sandboxID: 's1', nodeID: 'n1', message: 'timeout reached' });
    await store.lifecycle.putTombstone({
      sandboxID: 's1',
      reason: 'timeout',
      at: Date.now(),
      nodeID: 'n1',
      cubeCode: 130411,
      message: 'timeout reached',
      templateID: 'base',
      metadata: { run: '7' },
      owner: 'k1',
    });
    await store.appendEvent({ at: Date.now(), kind: 'sandbox.destroyed', sandboxID: 's1', nodeID: 'n1', message: 'destroyed' });
    await store.appendEvent({
      at: Date.now(),
      kind: 'sandbox.died',
      sandboxID: 's1',
      nodeID: 'n1',
      code: 130411,
      death: 'timeout',
      message: 'timeout reached',
    });
    // Both replicas at once, twice: one holds the lease, the other's derive adds nothing.
    await Promise.all([a.derive(), b.derive(), a.derive(), b.derive()]);
    await Promise.all([a.deliverNow(), b.deliverNow()]);
    const events = await a.events({ sandboxID: 's1', offset: 0, limit: 10, orderAsc: true });
    expect(events.map((e) => e.type)).toEqual(['sandbox.lifecycle.created', 'sandbox.lifecycle.killed']);
    expect(events[1]).toMatchObject({ owner: 'k1', templateID: 'base', data: { kill_reason: 'timeout', cube_code: 130411, sandbox_metadata: { run: '7' } } });
    // The first attempts failed (500): retried after the backoff, by whichever replica claims them.
    expect(received.map((r) => r.answered)).toEqual([500, 500]);
    await new Promise((r) => setTimeout(r, backoffMs(1) + 100));
    // A third replica (the first two gone) carries on from the store.
    const c = replica(await open(), 'r3');
    await Promise.all([c.deliverNow(), b.deliverNow()]);
    const ok = received.filter((r) => r.answered === 200);
    expect(ok.map((r) => (JSON.parse(r.body) as { type: string }).type).sort()).toEqual(['sandbox.lifecycle.created', 'sandbox.lifecycle.killed']);
    for (const r of received) {
      expect(r.headers).toMatchObject({ 'e2b-webhook-id': hook.id, 'e2b-signature-version': 'v1', 'content-type': 'application/json' });
      // E2B's documented check: base64 of SHA-256(secret + body), made URL-safe, padding dropped.
      const expected = createHash('sha256').update(`shh${r.body}`).digest('base64').replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
      expect(r.headers['e2b-signature']).toBe(expected);
      expect(signature('shh', r.body)).toBe(expected);
    }
    expect(new Set(received.map((r) => r.headers['e2b-delivery-id'])).size).toBe(received.length);
    const killed = JSON.parse(ok.find((r) => r.body.includes('killed'))!.body) as Record<string, unknown>;
    expect(killed).toMatchObject({
      version: 'v1',
      type: 'sandbox.lifecycle.killed',
      sandboxId: 's1',
      sandboxTemplateId: 'base',
      sandboxTeamId: 'k1',
      eventData: { kill_reason: 'timeout' },
    });
    expect(await store.lifecycle.queuedDeliveries()).toBe(0);
  }, 60_000);
});

describe('giving up', () => {
  it('the last failed attempt drops the delivery and says so in a webhook.failed event; a deleted webhook is not sent to', async () => {
    const store = new EmbeddedStore({ path: ':memory:' });
    await store.init();
    try {
      const said: Omit<EventView, 'id' | 'at'>[] = [];
      const d = new Deliverer({ store: store.lifecycle, log, appendEvent: async (e) => void said.push(e) });
      const dead = 'http://127.0.0.1:9/nothing-listens';
      await store.lifecycle.putWebhook({ id: 'w', name: 'gone', url: dead, enabled: true, events: ['sandbox.lifecycle.killed'], secret: 's', createdAt: 1 });
      await store.lifecycle.enqueueDeliveries([{ id: 'd1', webhookID: 'w', eventID: 'e1', body: '{}', attempts: MAX_ATTEMPTS - 2, dueAt: 0 }], 10);
      await d.run();
      expect(await store.lifecycle.claimDeliveries(Date.now() + backoffMs(MAX_ATTEMPTS - 1) + 1, 10, 1)).toMatchObject([
        { id: 'd1', attempts: MAX_ATTEMPTS - 1, lastError: expect.any(String) },
      ]);
      await store.lifecycle.retryDelivery({ id: 'd1', webhookID: 'w', eventID: 'e1', body: '{}', attempts: MAX_ATTEMPTS - 1, dueAt: 0 });
      await d.run();
      expect(await store.lifecycle.queuedDeliveries()).toBe(0);
      expect(said).toEqual([
        expect.objectContaining({ kind: 'webhook.failed', message: expect.stringContaining(`not delivered after ${MAX_ATTEMPTS} attempts`) }),
      ]);
      // Queued, then its webhook deleted: dropped unsent.
      await store.lifecycle.putWebhook({ id: 'w2', name: 'off', url: dead, enabled: false, events: ['sandbox.lifecycle.killed'], secret: 's', createdAt: 2 });
      await store.lifecycle.enqueueDeliveries([{ id: 'd2', webhookID: 'w2', eventID: 'e2', body: '{}', attempts: 0, dueAt: 0 }], 10);
      await d.run();
      expect(await store.lifecycle.queuedDeliveries()).toBe(0);
      expect(said).toHaveLength(1);
    } finally {
      await store.close();
    }
  });
});
