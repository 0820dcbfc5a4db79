// Contract tests every StateStore backend must pass. Call from a backend's test file:
//   storeContract('embedded', async () => ({ store, cleanup }))
// The factory returns a fresh, empty, initialised store and a cleanup that removes it.
import { createHash } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { ApiKeyRecord, KeyQuotas, KeyRole } from '../../src/model/api-key.js';
import type { EventView } from '../../src/model/event.js';
import type { NodeView } from '../../src/model/node.js';
import type { SandboxRecord, SnapshotRecord } from '../../src/model/sandbox.js';
import type { VolumeRecord } from '../../src/model/volume.js';
import type { StateStore } from '../../src/store/types.js';
import { lifecycleContract } from './lifecycle-contract.js';

export type StoreFactory = (opts: { eventRetention: number }) => Promise<{ store: StateStore; cleanup: () => Promise<void> }>;

export function sandboxRecord(id: string, over: Partial<SandboxRecord> = {}): SandboxRecord {
  return {
    sandboxID: id,
    templateID: 'host',
    nodeID: 'node-a',
    state: 'running',
    spec: { cpus: 1, memoryMiB: 256, diskGiB: 1 },
    metadata: {},
    startedAt: Date.parse('2026-01-01T00:00:00.000Z'),
    endAt: Date.parse('2026-01-01T00:05:00.000Z'),
    runtime: 'ns',
    accessToken: `tok-${id}`,
    envVars: { A: '1' },
    ...over,
  };
}

/** The record as versions before numeric times stored it (a JSON column, a Redis route): ISO 8601 times. */
export function legacyRecordJson(id: string, over: Record<string, unknown> = {}): string {
  return JSON.stringify({ ...sandboxRecord(id), startedAt: '2026-01-01T00:00:00.000Z', endAt: '2026-01-01T00:05:00.000Z', ...over });
}

export function apiKeyRecord(id: string, name: string, role: KeyRole, quotas: KeyQuotas = {}): ApiKeyRecord {
  return {
    id,
    name,
    role,
    hash: createHash('sha256').update(id).digest('hex'),
    quotas,
    createdAt: Date.parse('2026-01-01T00:00:00.000Z'),
    createdBy: 'system',
  };
}

export function snapshotRecord(id: string, createdAt: number): SnapshotRecord {
  return {
    snapshotID: id,
    names: [`n-${id}`],
    sandboxID: 'a',
    nodeID: 'node-a',
    templateID: 'host',
    runtime: 'ns',
    keeps: 'filesystem',
    spec: { cpus: 1, memoryMiB: 256, diskGiB: 1 },
    metadata: { k: 'v' },
    createdAt,
    envVars: { A: '1' },
  };
}

/** A snapshot record as versions before numeric times stored it: its JSON with createdAt in ISO 8601 (also the created_at column). */
export const LEGACY_SNAPSHOT = {
  id: 'snap-old',
  createdAt: '2026-01-01T00:00:03.000Z',
  json: JSON.stringify({ ...snapshotRecord('snap-old', 0), createdAt: '2026-01-01T00:00:03.000Z' }),
};

/** A node's registry record as versions before numeric times stored it, and what reading it must give. */
export const LEGACY_NODE_JSON = JSON.stringify({
  nodeID: 'n1',
  address: 'http://10.0.0.2:7000',
  cordoned: true,
  draining: true,
  evictAt: '2026-01-01T00:10:00.000Z',
  joinedAt: '2026-01-01T00:00:00.000Z',
});
export const EPOCH_NODE = {
  nodeID: 'n1',
  address: 'http://10.0.0.2:7000',
  cordoned: true,
  draining: true,
  evictAt: Date.parse('2026-01-01T00:10:00.000Z'),
  joinedAt: Date.parse('2026-01-01T00:00:00.000Z'),
};

/** An event as versions before numeric times stored it (its JSON body), and its time as reading it must give it. */
export const LEGACY_EVENT_BODY = JSON.stringify({ at: '2026-01-01T00:00:07.000Z', kind: 'node.joined', nodeID: 'n1', message: 'old' });
export const EPOCH_EVENT_AT = Date.parse('2026-01-01T00:00:07.000Z');

/** What every read of a legacy record must give: epoch ms. */
export const EPOCH_TIMES = { startedAt: Date.parse('2026-01-01T00:00:00.000Z'), endAt: Date.parse('2026-01-01T00:05:00.000Z') };

export function storeContract(name: string, factory: StoreFactory): void {
  describe(`StateStore contract: ${name}`, () => {
    let store: StateStore;
    let cleanup: () => Promise<void>;
    beforeEach(async () => {
      ({ store, cleanup } = await factory({ eventRetention: 5 }));
    });
    afterEach(async () => {
      await store.close();
      await cleanup();
    });

    lifecycleContract(() => store);

    it('stores, updates, filters and deletes sandbox records', async () => {
      await store.putSandbox(sandboxRecord('a', { metadata: { team: 'rl' } }));
      await store.putSandbox(sandboxRecord('b', { state: 'paused', nodeID: 'node-b' }));
      await store.putSandbox(sandboxRecord('c', { templateID: 'deb' }));
      expect((await store.getSandbox('a'))?.accessToken).toBe('tok-a');
      expect((await store.getSandbox('a'))?.envVars).toEqual({ A: '1' });
      expect((await store.listSandboxes()).map((s) => s.sandboxID).sort()).toEqual(['a', 'b', 'c']);
      expect((await store.listSandboxes({ state: ['paused'] })).map((s) => s.sandboxID)).toEqual(['b']);
      expect((await store.listSandboxes({ nodeID: 'node-b' })).map((s) => s.sandboxID)).toEqual(['b']);
      expect((await store.listSandboxes({ templateID: 'deb' })).map((s) => s.sandboxID)).toEqual(['c']);
      expect((await store.listSandboxes({ metadata: { team: 'rl' } })).map((s) => s.sandboxID)).toEqual(['a']);
      expect(await store.updateSandboxState('a', 'error', 'init died')).toBe(true);
      expect(await store.getSandbox('a')).toMatchObject({ state: 'error', reason: 'init died' });
      expect(await store.updateSandboxState('a', 'running')).toBe(true);
      expect((await store.getSandbox('a'))?.reason).toBeUndefined();
      expect(await store.updateSandboxState('zz', 'running')).toBe(false);
      await store.deleteSandbox('a');
      await store.deleteSandbox('a');
      expect(await store.getSandbox('a')).toBeUndefined();
    });

    it('bumps a generation on every write; compare-and-set writes and deletes lose to a newer write', async () => {
      const g1 = await store.putSandbox(sandboxRecord('a', { state: 'creating' }));
      expect((await store.getSandbox('a'))?.generation).toBe(g1);
      // A reader that read g1 and writes late loses to the write made since.
      const g2 = await store.putSandboxIf(sandboxRecord('a', { state: 'running' }), g1);
      expect(g2).toBeGreaterThan(g1);
      expect(await store.putSandboxIf(sandboxRecord('a', { state: 'creating' }), g1)).toBe(0);
      expect(await store.deleteSandboxIf('a', g1)).toBe(false);
      expect(await store.getSandbox('a')).toMatchObject({ state: 'running', generation: g2 });
      expect((await store.listSandboxes())[0]?.generation).toBe(g2);
      // 0: only when there is no live record.
      expect(await store.putSandboxIf(sandboxRecord('a', { state: 'creating' }), 0)).toBe(0);
      expect(await store.putSandboxIf(sandboxRecord('b'), 0)).toBeGreaterThan(0);
      expect(await store.deleteSandboxIf('a', g2)).toBe(true);
      expect(await store.getSandbox('a')).toBeUndefined();
      // A deleted record is not brought back by a late compare-and-set.
      expect(await store.putSandboxIf(sandboxRecord('a', { state: 'creating' }), g2)).toBe(0);
      expect(await store.getSandbox('a')).toBeUndefined();
    });

    it('appends events with increasing ids, lists since an id and keeps only the retention', async () => {
      const ids: number[] = [];
      for (let i = 0; i < 8; i++) ids.push((await store.appendEvent({ at: Date.now(), kind: 'sandbox.created', sandboxID: `s${i}`, message: `m${i}` })).id);
      for (let i = 1; i < ids.length; i++) expect(ids[i]!).toBeGreaterThan(ids[i - 1]!);
      const all = await store.listEvents({ limit: 100 });
      expect(all.map((e) => e.message)).toEqual(['m3', 'm4', 'm5', 'm6', 'm7']);
      const since = await store.listEvents({ sinceID: ids[5]! });
      expect(since.map((e) => e.message)).toEqual(['m6', 'm7']);
      expect((await store.listEvents({ limit: 2 })).map((e) => e.message)).toEqual(['m6', 'm7']);
      // Paging back (the console's events view): the newest `limit` before an id, oldest first.
      expect((await store.listEvents({ beforeID: ids[6]!, limit: 2 })).map((e) => e.message)).toEqual(['m4', 'm5']);
      expect((await store.listEvents({ beforeID: ids[3]! })).map((e) => e.message)).toEqual([]);
    });

    it('keeps lifecycle events apart from a flood: OOM events push out only older OOM events (issue 30 item 8)', async () => {
      const add = (kind: EventView['kind'], message: string) => store.appendEvent({ at: Date.now(), kind, sandboxID: 's0', message });
      for (let i = 0; i < 3; i++) await add('sandbox.created', `created ${i}`);
      for (let i = 0; i < 20; i++) await add('sandbox.oom', `oom ${i}`);
      await add('sandbox.died', 'died');
      const oom = ['oom 15', 'oom 16', 'oom 17', 'oom 18', 'oom 19'];
      expect((await store.listEvents({ limit: 100 })).map((e) => e.message)).toEqual(['created 0', 'created 1', 'created 2', ...oom, 'died']);
      // The lifecycle keeps its own retention too.
      for (let i = 3; i < 7; i++) await add('sandbox.created', `created ${i}`);
      expect((await store.listEvents({ limit: 100 })).map((e) => e.message)).toEqual([...oom, 'died', 'created 3', 'created 4', 'created 5', 'created 6']);
    });

    it("appends a node's notice once per sender and seq, whatever else is appended between", async () => {
      const at = Date.now();
      const notice = (seq: number) => ({ at, kind: 'sandbox.created' as const, sandboxID: `n${seq}`, message: `notice ${seq}` });
      const a = await store.appendNodeEvent(notice(1), { sender: 'node-a:1', seq: 1 });
      expect(a?.sandboxID).toBe('n1');
      // The same heartbeat sent again (its answer was lost), with one more notice and another sender's.
      expect(await store.appendNodeEvent(notice(1), { sender: 'node-a:1', seq: 1 })).toBeUndefined();
      await store.appendEvent({ at, kind: 'node.joined', message: 'between' });
      expect((await store.appendNodeEvent(notice(2), { sender: 'node-a:1', seq: 2 }))?.id).toBeGreaterThan(a!.id);
      expect(await store.appendNodeEvent(notice(1), { sender: 'node-b:1', seq: 1 })).toBeDefined();
      // Concurrent appends of one batch go together; the repeated seq still counts once.
      const again = await Promise.all([
        store.appendNodeEvent(notice(2), { sender: 'node-a:1', seq: 2 }),
        store.appendNodeEvent(notice(3), { sender: 'node-a:1', seq: 3 }),
      ]);
      expect(again.map((e) => e?.sandboxID)).toEqual([undefined, 'n3']);
      expect((await store.listEvents({ sinceID: a!.id - 1 })).map((e) => e.message)).toEqual(['notice 1', 'between', 'notice 2', 'notice 1', 'notice 3']);
    });

    it('keeps config versions, newest first', async () => {
      expect(await store.latestConfigVersion()).toBeUndefined();
      await store.putConfigVersion({ version: 1, at: 'x', actor: 'system', reason: 'start', master: { a: 1 }, cubelet: {} });
      await store.putConfigVersion({ version: 2, at: 'y', actor: 'k1', reason: 'set a', master: { a: 2 }, cubelet: {} });
      expect(await store.latestConfigVersion()).toMatchObject({ version: 2, actor: 'k1', master: { a: 2 } });
      expect((await store.listConfigVersions()).map((v) => v.version)).toEqual([2, 1]);
    });

    it('records audit entries with who, what and when', async () => {
      await store.appendAudit({ at: 't1', actor: 'k1', action: 'node.cordon', target: 'node-a', outcome: 'ok' });
      await store.appendAudit({
        at: 't2',
        actor: 'k2',
        action: 'config.set',
        target: 'host.quota.paused_resource_release_ratio',
        outcome: 'ok',
        detail: { value: 0.5 },
      });
      const all = await store.listAudit();
      expect(all.map((a) => a.action)).toEqual(['config.set', 'node.cordon']);
      expect(all[0]!.detail).toEqual({ value: 0.5 });
      expect((await store.listAudit({ actor: 'k1' })).map((a) => a.target)).toEqual(['node-a']);
    });

    it('keeps API keys by id and by hash, unique by id, name and hash; patches and removes them', async () => {
      const a = apiKeyRecord('key-aaaa0001', 'ops', 'admin');
      const b = apiKeyRecord('key-bbbb0002', 'rl-team', 'user', { sandboxes: 20, vcpus: 8 });
      expect(await store.putApiKey(a)).toBe(true);
      expect(await store.putApiKey(b)).toBe(true);
      expect(await store.putApiKey({ ...b, hash: 'f'.repeat(64) })).toBe(false); // id taken
      expect(await store.putApiKey({ ...b, id: 'key-cccc0003', hash: 'e'.repeat(64) })).toBe(false); // name taken
      expect(await store.putApiKey({ ...b, id: 'key-cccc0003', name: 'other' })).toBe(false); // hash taken
      expect(await store.getApiKey('key-bbbb0002')).toEqual(b);
      expect(await store.apiKeyByHash(b.hash)).toEqual(b);
      expect(await store.apiKeyByHash('0'.repeat(64))).toBeUndefined();
      expect((await store.listApiKeys()).map((k) => k.id)).toEqual(['key-aaaa0001', 'key-bbbb0002']);
      expect(await store.updateApiKey('key-bbbb0002', { role: 'admin', quotas: { sandboxes: null, memory_mib: 4096 } })).toEqual({
        ...b,
        role: 'admin',
        quotas: { vcpus: 8, memory_mib: 4096 },
      });
      expect(await store.getApiKey('key-bbbb0002')).toMatchObject({ role: 'admin', quotas: { vcpus: 8, memory_mib: 4096 } });
      await expect(store.updateApiKey('key-bbbb0002', { name: 'ops' })).rejects.toMatchObject({ kind: 'CONFLICT' });
      expect(await store.updateApiKey('key-nope', { name: 'x' })).toBeUndefined();
      expect(await store.deleteApiKey('key-aaaa0001')).toBe(true);
      expect(await store.deleteApiKey('key-aaaa0001')).toBe(false);
      expect(await store.apiKeyByHash(a.hash)).toBeUndefined();
    });

    it("writes each audit row with its key's name as it was then", async () => {
      await store.putApiKey(apiKeyRecord('key-aaaa0001', 'ops', 'admin'));
      await store.appendAudit({ at: 't1', actor: 'key-aaaa0001', action: 'key.create', target: 'key-bbbb0002', outcome: 'ok' });
      await store.updateApiKey('key-aaaa0001', { name: 'ops-renamed' });
      await store.appendAudit({ at: 't2', actor: 'key-aaaa0001', action: 'config.set', target: 'x', outcome: 'ok' });
      await store.appendAudit({ at: 't3', actor: 'system', action: 'config.reload', target: 'x', outcome: 'ok' });
      const rows = await store.listAudit();
      expect(rows.map((r) => r.actorName)).toEqual([undefined, 'ops-renamed', 'ops']);
    });

    it('key quotas: usage counts holding records and standing claims, a claim is admitted or refused as one step, naming the quota', async () => {
      const limits = { sandboxes: 3, vcpus: 2.5, memory_mib: 0, creates_per_sec: 0 };
      const claim = (sandboxID: string, cpus = 1, owner = 'key-1') => store.claimQuota({ owner, sandboxID, cpus, memoryMiB: 512, limits, ttlMs: 60_000 });
      expect(await claim('s1')).toBeUndefined();
      expect(await claim('s1')).toBeUndefined(); // a retry of the same create
      expect((await store.quotaUsage(['key-1'])).get('key-1')).toEqual({ sandboxes: 1, vcpus: 1, memoryMiB: 512 });
      // Its record, once written in a holding state, takes over the claim: counted once.
      await store.putSandbox(sandboxRecord('s1', { state: 'creating', owner: 'key-1', spec: { cpus: 1, memoryMiB: 512, diskGiB: 1 } }));
      await store.putSandbox(sandboxRecord('s1', { state: 'running', owner: 'key-1', spec: { cpus: 1, memoryMiB: 512, diskGiB: 1 } }));
      expect((await store.quotaUsage(['key-1'])).get('key-1')).toEqual({ sandboxes: 1, vcpus: 1, memoryMiB: 512 });
      expect(await claim('s2', 1.5)).toBeUndefined();
      expect(await claim('s3', 0.5)).toEqual({ quota: 'vcpus', used: 2.5, limit: 2.5, retryAfter: 1 });
      // Other keys and records of no key count for nobody here.
      expect(await claim('o1', 1, 'key-2')).toBeUndefined();
      await store.putSandbox(sandboxRecord('x1', { state: 'running' }));
      expect(await store.quotaUsage(['key-1', 'key-2', 'key-3'])).toEqual(
        new Map([
          ['key-1', { sandboxes: 2, vcpus: 2.5, memoryMiB: 1024 }],
          ['key-2', { sandboxes: 1, vcpus: 1, memoryMiB: 512 }],
          ['key-3', { sandboxes: 0, vcpus: 0, memoryMiB: 0 }],
        ]),
      );
      // A failed create releases its claim; a paused sandbox holds nothing; a deleted one neither.
      await store.releaseQuota('key-1', 's2');
      await store.putSandbox(sandboxRecord('s1', { state: 'paused', owner: 'key-1', spec: { cpus: 1, memoryMiB: 512, diskGiB: 1 } }));
      expect((await store.quotaUsage(['key-1'])).get('key-1')).toEqual({ sandboxes: 0, vcpus: 0, memoryMiB: 0 });
      for (const id of ['a', 'b', 'c']) expect(await claim(id, 0.5)).toBeUndefined();
      expect(await claim('d', 0.5)).toEqual({ quota: 'sandboxes', used: 3, limit: 3, retryAfter: 1 });
      await store.deleteSandbox('s1');
      await store.putSandbox(sandboxRecord('a', { state: 'running', owner: 'key-1', spec: { cpus: 0.5, memoryMiB: 512, diskGiB: 1 } }));
      await store.deleteSandbox('a');
      expect((await store.quotaUsage(['key-1'])).get('key-1')).toEqual({ sandboxes: 2, vcpus: 1, memoryMiB: 1024 });
      // A claim whose create never recorded its sandbox lapses.
      expect(await store.claimQuota({ owner: 'key-4', sandboxID: 'z', cpus: 1, memoryMiB: 1, limits, ttlMs: 50 })).toBeUndefined();
      await sleep(120);
      expect((await store.quotaUsage(['key-4'])).get('key-4')).toEqual({ sandboxes: 0, vcpus: 0, memoryMiB: 0 });
    });

    it('key quotas: creates_per_sec is a bucket of one second, taken only by admitted claims', async () => {
      const limits = { sandboxes: 1, vcpus: 0, memory_mib: 0, creates_per_sec: 2 };
      const claim = (sandboxID: string) => store.claimQuota({ owner: 'key-r', sandboxID, cpus: 1, memoryMiB: 1, limits, ttlMs: 60_000 });
      expect(await claim('r1')).toBeUndefined();
      // Refused by the sandboxes quota: no token taken.
      expect(await claim('r2')).toMatchObject({ quota: 'sandboxes' });
      await store.releaseQuota('key-r', 'r1');
      expect(await claim('r3')).toBeUndefined();
      await store.releaseQuota('key-r', 'r3');
      expect(await claim('r4')).toEqual({ quota: 'creates_per_sec', used: 2, limit: 2, retryAfter: 1 });
      await sleep(600);
      expect(await claim('r5')).toBeUndefined();
    });

    it('keeps snapshot records, oldest first, and deletes them once', async () => {
      await store.putSnapshot(snapshotRecord('snap-b', Date.parse('2026-01-01T00:00:02.000Z')));
      await store.putSnapshot(snapshotRecord('snap-a', Date.parse('2026-01-01T00:00:01.000Z')));
      expect(await store.getSnapshot('snap-b')).toEqual(snapshotRecord('snap-b', Date.parse('2026-01-01T00:00:02.000Z')));
      expect((await store.listSnapshots()).map((s) => s.snapshotID)).toEqual(['snap-a', 'snap-b']);
      expect(await store.deleteSnapshot('snap-a')).toBe(true);
      expect(await store.deleteSnapshot('snap-a')).toBe(false);
      expect(await store.getSnapshot('snap-a')).toBeUndefined();
      expect((await store.listSnapshots()).map((s) => s.snapshotID)).toEqual(['snap-b']);
    });

    it('keeps volume records, oldest first, names unique per owner, and deletes them once', async () => {
      const vol = (volumeID: string, name: string, owner: string | undefined, createdAt: number): VolumeRecord => ({
        volumeID,
        name,
        ...(owner !== undefined ? { owner } : {}),
        nodeID: 'n1',
        sizeBytes: 1024 ** 3,
        createdAt,
        token: `t-${volumeID}`,
      });
      expect(await store.addVolume(vol('vol-b', 'data', 'key-1', 2))).toBe(true);
      expect(await store.addVolume(vol('vol-a', 'data', 'key-2', 1))).toBe(true);
      expect(await store.addVolume(vol('vol-c', 'data', undefined, 3))).toBe(true);
      // The same name for the same owner (none counts as one owner too), or the same id: refused.
      expect(await store.addVolume(vol('vol-d', 'data', 'key-1', 4))).toBe(false);
      expect(await store.addVolume(vol('vol-e', 'data', undefined, 5))).toBe(false);
      expect(await store.addVolume(vol('vol-b', 'other', 'key-1', 6))).toBe(false);
      expect(await store.getVolume('vol-b')).toEqual(vol('vol-b', 'data', 'key-1', 2));
      expect((await store.listVolumes()).map((v) => v.volumeID)).toEqual(['vol-a', 'vol-b', 'vol-c']);
      expect(await store.deleteVolume('vol-b')).toBe(true);
      expect(await store.deleteVolume('vol-b')).toBe(false);
      expect(await store.getVolume('vol-b')).toBeUndefined();
      expect(await store.addVolume(vol('vol-d', 'data', 'key-1', 4))).toBe(true);
      for (const id of ['vol-a', 'vol-c', 'vol-d']) await store.deleteVolume(id);
    });

    it('keeps the node registry with cordon and drain flags', async () => {
      await store.putNode({ nodeID: 'n1', cordoned: false, draining: false, joinedAt: 1 });
      await store.putNode({ nodeID: 'n1', cordoned: true, draining: false, joinedAt: 1 });
      await store.putNode({ nodeID: 'n2', cordoned: false, draining: true, joinedAt: 1 });
      expect(await store.getNode('n1')).toMatchObject({ cordoned: true });
      expect((await store.listNodes()).map((n) => n.nodeID)).toEqual(['n1', 'n2']);
      await store.deleteNode('n1');
      expect(await store.getNode('n1')).toBeUndefined();
    });

    it('remembers deletes: wasDeleted until the id is live again, and a create-if-absent refuses it', async () => {
      await store.putSandbox(sandboxRecord('a'));
      expect(await store.wasDeleted('a')).toBe(false);
      expect(await store.wasDeleted('never')).toBe(false);
      await store.deleteSandbox('a');
      expect(await store.wasDeleted('a')).toBe(true);
      expect(await store.putSandboxIf(sandboxRecord('a'), 0)).toBe(0);
      expect(await store.getSandboxForWrite('a')).toBeUndefined();
      const g = await store.putSandbox(sandboxRecord('b'));
      expect(await store.deleteSandboxIf('b', g)).toBe(true);
      expect(await store.wasDeleted('b')).toBe(true);
      // An unconditional write brings it back live (an operator's explicit put).
      await store.putSandbox(sandboxRecord('a', { state: 'paused' }));
      expect(await store.wasDeleted('a')).toBe(false);
      expect(await store.getSandboxForWrite('a')).toMatchObject({ state: 'paused' });
    });

    it("marks a node's sandboxes, leaving those already in the state", async () => {
      await store.putSandbox(sandboxRecord('a', { nodeID: 'n1' }));
      await store.putSandbox(sandboxRecord('b', { nodeID: 'n1', state: 'lost' }));
      await store.putSandbox(sandboxRecord('c', { nodeID: 'n2' }));
      const marked = await store.markNodeSandboxes('n1', 'lost', 'n1 stopped heartbeating');
      expect(marked.map((r) => r.sandboxID)).toEqual(['a']);
      expect(await store.getSandbox('a')).toMatchObject({ state: 'lost', reason: 'n1 stopped heartbeating' });
      expect(await store.getSandbox('c')).toMatchObject({ state: 'running' });
    });

    it('config head: compare-and-set on its version, each change kept in the history', async () => {
      const v = (version: number, actor: string) => ({ version, at: 't', actor, reason: `set by ${actor}`, master: { by: actor }, cubelet: {} });
      expect(await store.configHead()).toBeUndefined();
      expect(await store.casConfigHead(v(1, 'a'), 0)).toBe(true);
      expect(await store.casConfigHead(v(1, 'b'), 0)).toBe(false);
      expect(await store.casConfigHead(v(2, 'a'), 1)).toBe(true);
      // Two replicas that both ran version 1: the second loses, and nothing of it is kept.
      expect(await store.casConfigHead(v(2, 'b'), 1)).toBe(false);
      // One operator's key setting two values through two replicas in the same millisecond: the
      // same version, time and actor, other content. The second loses too (it was taken for its own
      // write, both answered 200 under one version).
      expect(await store.casConfigHead({ ...v(2, 'a'), master: { by: 'a, again' } }, 1)).toBe(false);
      expect(await store.configHead()).toMatchObject({ version: 2, actor: 'a', master: { by: 'a' } });
      expect((await store.listConfigVersions()).map((c) => `${c.version} ${c.actor}`)).toEqual(['2 a', '1 a']);
    });

    it('templates per node, replaced by each report and gone with the node', async () => {
      await store.putNode({ nodeID: 'n1', cordoned: false, draining: false, joinedAt: 1 });
      await store.setNodeTemplates('n1', ['host', 'deb']);
      await store.setNodeTemplates('n2', ['host']);
      expect(await store.listTemplates()).toEqual([
        { templateID: 'deb', nodes: ['n1'] },
        { templateID: 'host', nodes: ['n1', 'n2'] },
      ]);
      await store.setNodeTemplates('n1', ['host']);
      expect(await store.listTemplates()).toEqual([{ templateID: 'host', nodes: ['n1', 'n2'] }]);
      await store.deleteNode('n1');
      expect(await store.listTemplates()).toEqual([{ templateID: 'host', nodes: ['n2'] }]);
    });

    it('node metrics expire with their time; lost markers are set once; in-flight creates count across callers', async () => {
      await store.putNodeMetrics([{ nodeID: 'n1' } as NodeView], 100);
      expect((await store.getNodeMetrics(['n1', 'n2'])).has('n1')).toBe(true);
      await sleep(200);
      expect((await store.getNodeMetrics(['n1'])).has('n1')).toBe(false);
      // A heartbeat without a view keeps the view and moves its lastSeen; an unknown or expired node is asked for it.
      const t = Date.parse('2026-01-01T00:00:00.000Z');
      await store.putNodeMetrics([{ nodeID: 'n3', lastSeen: t + 1000 } as NodeView], 600);
      expect(
        await store.touchNodeMetrics(
          [
            { nodeID: 'n3', lastSeen: t + 2000 },
            { nodeID: 'n4', lastSeen: t + 2000 },
          ],
          600,
        ),
      ).toEqual(['n4']);
      expect((await store.getNodeMetrics(['n3'])).get('n3')?.lastSeen).toBe(t + 2000);
      await sleep(400);
      expect(await store.touchNodeMetrics([{ nodeID: 'n3', lastSeen: t + 3000 }], 600)).toEqual([]);
      await sleep(400);
      expect((await store.getNodeMetrics(['n3'])).get('n3')?.lastSeen).toBe(t + 3000);
      await sleep(700);
      expect(await store.touchNodeMetrics([{ nodeID: 'n3', lastSeen: t + 4000 }], 600)).toEqual(['n3']);
      expect((await store.getNodeMetrics(['n3'])).has('n3')).toBe(false);
      expect(await store.markNodeLost('n1')).toBe(true);
      expect(await store.markNodeLost('n1')).toBe(false);
      expect([...(await store.lostNodes(['n1', 'n2']))]).toEqual(['n1']);
      await store.clearNodeLost('n1');
      expect((await store.lostNodes(['n1'])).size).toBe(0);
      await store.incInFlight('n1');
      await store.incInFlight('n1');
      await store.decInFlight('n1');
      await store.decInFlight('n1');
      await store.decInFlight('n1');
      await store.incInFlight('n1');
      expect((await store.inFlight()).get('n1')).toBe(1);
      expect((await store.inFlight()).get('n2')).toBeUndefined();
      await store.decInFlight('n1');
      expect((await store.inFlight()).size).toBe(0);
    });

    it('operation locks: one holder at a time, release only with the owner token, fencing tokens increase', async () => {
      const t1 = await store.acquireLock('sbx', 5000);
      expect(t1).toBeTypeOf('string');
      expect(await store.acquireLock('sbx', 5000)).toBeUndefined();
      expect(await store.releaseLock('sbx', 'not-the-token')).toBe(false);
      expect(await store.renewLock('sbx', 'not-the-token', 5000)).toBe(false);
      expect(await store.renewLock('sbx', t1!, 5000)).toBe(true);
      expect(await store.releaseLock('sbx', t1!)).toBe(true);
      const t2 = await store.acquireLock('sbx', 50);
      expect(Number(t2)).toBeGreaterThan(Number(t1));
      await sleep(120);
      const t3 = await store.acquireLock('sbx', 5000);
      expect(Number(t3)).toBeGreaterThan(Number(t2));
      // t2 expired and t3 took over: t2's late release or renewal must not touch t3's lock.
      expect(await store.releaseLock('sbx', t2!)).toBe(false);
      expect(await store.renewLock('sbx', t2!, 5000)).toBe(false);
      expect(await store.acquireLock('sbx', 5000)).toBeUndefined();
      // Tokens start above any a node accepted before the store was emptied (fenceFloor).
      expect(Number(t1)).toBeGreaterThan(Date.parse('2026-01-01T00:00:00Z') * 1000);
    });

    it('create keys: one claim per key until it expires; taken over only while open (no outcome, or failed) and over its sandbox', async () => {
      const now = Date.now();
      const claim = (sandboxID: string, over?: string, expiresAt = now + 600_000) =>
        store.claimCreateKey({ key: 'k1', sandboxID, deadline: now + 10_000, expiresAt }, over);
      expect(await store.getCreateKey('k1')).toBeUndefined();
      expect(await claim('sb1')).toEqual({ key: 'k1', sandboxID: 'sb1', deadline: now + 10_000, expiresAt: now + 600_000 });
      // Claimed: a second create with the key gets the first's claim, whatever it asks for.
      expect((await claim('sb2')).sandboxID).toBe('sb1');
      // Its creator moves to another node (over its own sandbox); over another's, nothing moves.
      expect((await claim('sb3', 'sb1')).sandboxID).toBe('sb3');
      expect((await claim('sb4', 'sb1')).sandboxID).toBe('sb3');
      // A settled claim stays, for every repeat, and only its own sandbox settles it.
      expect(await store.settleCreateKey('k1', 'sb1', { created: true })).toBe(false);
      expect(await store.settleCreateKey('k1', 'sb3', { refused: { kind: 'NOT_FOUND', message: 'template x not found' } })).toBe(true);
      expect(await store.getCreateKey('k1')).toMatchObject({ sandboxID: 'sb3', outcome: { refused: { kind: 'NOT_FOUND', message: 'template x not found' } } });
      expect((await claim('sb5', 'sb3')).sandboxID).toBe('sb3');
      // A failed create left nothing: the next one takes over.
      await store.claimCreateKey({ key: 'k2', sandboxID: 'a1', deadline: now, expiresAt: now + 600_000 });
      expect(await store.settleCreateKey('k2', 'a1', { failed: 'no node available' })).toBe(true);
      expect((await store.claimCreateKey({ key: 'k2', sandboxID: 'a2', deadline: now, expiresAt: now + 600_000 }, 'a1')).sandboxID).toBe('a2');
      expect((await store.getCreateKey('k2'))?.outcome).toBeUndefined();
      // Expired: gone, and claimed anew.
      await store.claimCreateKey({ key: 'k3', sandboxID: 'e1', deadline: now, expiresAt: Date.now() + 50 });
      await sleep(100);
      expect(await store.getCreateKey('k3')).toBeUndefined();
      expect((await store.claimCreateKey({ key: 'k3', sandboxID: 'e2', deadline: now, expiresAt: now + 600_000 })).sandboxID).toBe('e2');
    });

    it('create keys: of concurrent claims of one key exactly one wins, and all see it', async () => {
      const now = Date.now();
      const got = await Promise.all(
        Array.from({ length: 8 }, (_, i) => store.claimCreateKey({ key: 'race', sandboxID: `s${i}`, deadline: now, expiresAt: now + 600_000 })),
      );
      expect(new Set(got.map((g) => g.sandboxID)).size).toBe(1);
    });

    it('leases: held and extended by one holder, taken over after they lapse', async () => {
      expect(await store.holdLease('sweep', 'r1', 100)).toBe(true);
      expect(await store.holdLease('sweep', 'r2', 100)).toBe(false);
      expect(await store.holdLease('sweep', 'r1', 100)).toBe(true);
      await sleep(200);
      expect(await store.holdLease('sweep', 'r2', 100)).toBe(true);
    });
  });
}
