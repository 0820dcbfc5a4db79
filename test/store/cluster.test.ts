// The cluster store against the real Redis and MariaDB of this machine, each store under its
// own key prefix and database (dropped afterwards).
import { createConnection, createServer, type Server, type Socket } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import { CubeError } from '../../src/errors.js';
import type { NodeView } from '../../src/model/node.js';
import { ClusterStore } from '../../src/store/cluster/index.js';
import { clusterStateScope, REDIS_URL } from '../helpers/cluster-state.js';
import {
  EPOCH_EVENT_AT,
  EPOCH_NODE,
  EPOCH_TIMES,
  LEGACY_EVENT_BODY,
  LEGACY_NODE_JSON,
  LEGACY_SNAPSHOT,
  legacyRecordJson,
  sandboxRecord,
  snapshotRecord,
  storeContract,
} from './contract.js';

async function open(eventRetention = 100): Promise<{ store: ClusterStore; cleanup: () => Promise<void> }> {
  const scope = clusterStateScope();
  const store = new ClusterStore({ ...scope, eventRetention });
  try {
    await store.init();
  } catch (e) {
    await store.close().catch(() => undefined);
    await scope.drop();
    throw e;
  }
  return { store, cleanup: () => scope.drop() };
}

async function withStore(fn: (store: ClusterStore) => Promise<void>): Promise<void> {
  const { store, cleanup } = await open();
  try {
    await fn(store);
  } finally {
    await store.close();
    await cleanup();
  }
}

/** What a Redis restart does to us: our keys vanish (and, with `disconnect`, our connection drops). */
async function wipeRedis(store: ClusterStore, o: { disconnect?: boolean } = {}): Promise<void> {
  const admin = new Redis(REDIS_URL);
  try {
    const keys = await admin.keys(`${(store.live as unknown as { prefix: string }).prefix}*`);
    if (keys.length) await admin.del(...keys);
    if (o.disconnect) await admin.client('KILL', 'ID', String(await store.live.redis.client('ID')));
  } finally {
    admin.disconnect();
  }
}

storeContract('cluster (Redis + MySQL)', ({ eventRetention }) => open(eventRetention));

/**
 * A TCP relay to the machine's MariaDB: `onQuery` sees every packet a client sends (the two
 * sockets and the bytes) and returns true when it took care of it; otherwise it goes on.
 */
async function mysqlRelay(
  onQuery: (client: Socket, server: Socket, d: Buffer) => boolean,
): Promise<{ url: (database: string) => string; close: () => Promise<void> }> {
  const sockets = new Set<Socket>();
  const relay: Server = createServer((client) => {
    const server = createConnection(3306, '127.0.0.1');
    for (const s of [client, server]) {
      sockets.add(s);
      s.on('close', () => sockets.delete(s));
      s.on('error', () => undefined);
    }
    server.on('data', (d) => client.write(d));
    server.on('close', () => client.destroy());
    client.on('close', () => server.destroy());
    client.on('data', (d) => {
      if (!onQuery(client, server, d)) server.write(d);
    });
  });
  await new Promise<void>((resolve) => relay.listen(0, '127.0.0.1', resolve));
  const port = (relay.address() as { port: number }).port;
  return {
    url: (database) => `mysql://root@127.0.0.1:${port}/${database}`,
    close: async () => {
      for (const s of sockets) s.destroy();
      await new Promise((resolve) => relay.close(resolve));
    },
  };
}

/**
 * A relay that, once, stops the query carrying `marker` on its way: `atCommit` gets the two
 * sockets and the query's bytes (close the server's to roll the transaction back; or send it on
 * and close the client's at the answer, to lose it) and everything passes through after it.
 * The marker is mysql2's commit() by default (COM_QUERY, 3, "COMMIT").
 */
function commitCutter(atCommit: (client: Socket, server: Socket, commit: Buffer) => Promise<void>, marker = '\x03COMMIT'): ReturnType<typeof mysqlRelay> {
  let armed = true;
  return mysqlRelay((client, server, d) => {
    if (!armed || !d.includes(marker)) return false;
    armed = false;
    client.pause();
    void atCommit(client, server, d);
    return true;
  });
}

/** A store whose MySQL connections go through `relay`, and a scope to drop. */
async function relayedStore(relay: { url: (database: string) => string }): Promise<{ store: ClusterStore; cleanup: () => Promise<void> }> {
  const scope = clusterStateScope();
  const store = new ClusterStore({ ...scope, mysqlURL: relay.url(new URL(scope.mysqlURL).pathname.slice(1)) });
  return {
    store,
    cleanup: async () => {
      await store.close();
      await scope.drop();
    },
  };
}

describe('cluster store', () => {
  it("config history migrates to one row per version on a database the old way (keyed by version and actor, two rows for one version): the head's row or the latest is kept; the migration can run again", async () => {
    const scope = clusterStateScope();
    const sql = (store: ClusterStore) =>
      (store.mysql as unknown as { pool: { query(sql: string, args?: unknown[]): Promise<[{ [k: string]: unknown }[]]> } }).pool;
    const rec = (version: number, actor: string, at: string) => ({ version, at, actor, reason: `by ${actor}`, master: { actor }, cubelet: {} });
    // What the version before this one left: 11 migrations, the history keyed by (version, actor).
    const asOld = async (store: ClusterStore): Promise<void> => {
      await sql(store).query('ALTER TABLE config_versions DROP PRIMARY KEY, ADD PRIMARY KEY (version, actor)');
      await sql(store).query('DELETE FROM schema_migrations WHERE version > 11');
    };
    const first = new ClusterStore(scope);
    let store: ClusterStore | undefined;
    try {
      await first.init();
      await asOld(first);
      // Version 7: two replicas numbered their files' change the same; version 8: the head, by a, older than b's.
      for (const r of [
        rec(7, 'replica-a', '2026-11-30T09:00:00.000Z'),
        rec(7, 'replica-b', '2026-11-30T09:00:01.000Z'),
        rec(8, 'replica-a', '2026-11-30T10:00:00.000Z'),
        rec(8, 'replica-b', '2026-11-30T10:00:01.000Z'),
      ])
        await sql(first).query('INSERT INTO config_versions (version, at, actor, reason, master, cubelet) VALUES (?, ?, ?, ?, ?, ?)', [
          r.version,
          r.at,
          r.actor,
          r.reason,
          JSON.stringify(r.master),
          '{}',
        ]);
      expect(await first.casConfigHead(rec(8, 'replica-a', '2026-11-30T10:00:00.000Z'), 0)).toBe(true);
      await first.close();
      const history = async (s: ClusterStore) => (await s.listConfigVersions()).map((v) => `${v.version} ${v.actor}`);
      const key = async (s: ClusterStore) =>
        (
          await sql(s).query(
            "SELECT column_name AS c FROM information_schema.key_column_usage WHERE table_schema = DATABASE() AND table_name = 'config_versions' AND constraint_name = 'PRIMARY' ORDER BY ordinal_position",
          )
        )[0].map((r) => r.c);
      for (let run = 0; run < 2; run++) {
        store = new ClusterStore(scope);
        await store.init();
        expect(await key(store)).toEqual(['version']);
        expect(await history(store)).toEqual(['8 replica-a', '7 replica-b']);
        // Run again: a replica stopped after the delete, before the key (or both ran): same result.
        await sql(store).query('DELETE FROM schema_migrations WHERE version > 11');
        await store.close();
      }
      store = new ClusterStore(scope);
      await store.init();
      // One row per version: writing a version again replaces it.
      await store.putConfigVersion(rec(8, 'replica-c', '2026-11-30T11:00:00.000Z'));
      expect(await history(store)).toEqual(['8 replica-c', '7 replica-b']);
    } finally {
      await first.close().catch(() => undefined);
      await store?.close().catch(() => undefined);
      await scope.drop();
    }
  });

  it('record and audit writes that come together reach MariaDB as one query (one transaction), each with its own answer', async () => {
    let writes = 0;
    const relay = await mysqlRelay((_c, _s, d) => {
      if (/INTO sandbox_history|UPDATE sandbox_history|INTO audit/.test(d.toString('latin1'))) writes++;
      return false;
    });
    const { store, cleanup } = await relayedStore(relay);
    try {
      await store.init();
      writes = 0;
      const ids = Array.from({ length: 20 }, (_, i) => `b${i}`);
      const [gens, audits] = await Promise.all([
        Promise.all(ids.map((id) => store.putSandbox(sandboxRecord(id)))),
        Promise.all(ids.map((id) => store.appendAudit({ at: 't', actor: 'k', action: 'sandbox.create', target: id, outcome: 'ok' }))),
      ]);
      // The first write goes alone (nothing queued behind it yet); the other 39 in one batch.
      expect(writes).toBe(2);
      expect(gens).toEqual(ids.map(() => 1));
      expect(new Set(audits.map((a) => a.id)).size).toBe(20);
      expect((await store.listAudit({ limit: 50 })).map((a) => [a.id, a.target]).sort()).toEqual(audits.map((a) => [a.id, a.target]).sort());
      // Compare-and-set writes in a batch: each its own outcome.
      writes = 0;
      const next = await Promise.all(ids.map((id, i) => store.putSandboxIf({ ...sandboxRecord(id), state: 'paused' }, i % 2 === 0 ? 1 : 7)));
      expect(writes).toBe(2);
      expect(next).toEqual(ids.map((_, i) => (i % 2 === 0 ? 2 : 0)));
      expect((await store.mysql.getLiveSandbox('b2'))?.state).toBe('paused');
      expect((await store.mysql.getLiveSandbox('b3'))?.state).toBe('running');
    } finally {
      await cleanup();
      await relay.close();
    }
  });

  it('hostile text in batched writes (quotes, backslashes, statement separators, comments) is stored as data, in one batch: the batch runs several statements per query', async () => {
    let writes = 0;
    const relay = await mysqlRelay((_c, _s, d) => {
      if (/INTO sandbox_history|INTO audit/.test(d.toString('latin1'))) writes++;
      return false;
    });
    const { store, cleanup } = await relayedStore(relay);
    try {
      await store.init();
      writes = 0;
      const hostile = ["x'; DROP TABLE sandbox_history; --", "a\\'b", '"; COMMIT; DELETE FROM audit; #', '\u0000\n\r\u001a', '/* */ ROLLBACK'];
      await Promise.all([
        ...hostile.map((v, i) => store.putSandbox(sandboxRecord(`h${i}`, { metadata: { v } }))),
        ...hostile.map((v) => store.appendAudit({ at: 't', actor: v, action: 'sandbox.create', target: v, outcome: v })),
      ]);
      // The first alone, the other nine in one batch: a batch that broke on the text would have
      // been rolled back and each write made again on its own (more queries).
      expect(writes).toBe(2);
      expect((await store.listSandboxes()).map((r) => r.metadata['v']).sort()).toEqual([...hostile].sort());
      expect((await store.listAudit({ limit: 50 })).map((a) => a.target).sort()).toEqual([...hostile].sort());
    } finally {
      await cleanup();
      await relay.close();
    }
  });

  it('a statement that fails in a batch fails alone: the batch is rolled back and the others are written on their own', () =>
    withStore(async (store) => {
      const audit = (target: string, actor = 'k') => store.appendAudit({ at: 't', actor, action: 'sandbox.create', target, outcome: 'ok' });
      const first = audit('first');
      // actor is VARCHAR(128): MariaDB's strict mode refuses a longer one.
      const [recs, bad, rest] = await Promise.all([
        Promise.all(['r1', 'r2'].map((id) => store.putSandbox(sandboxRecord(id)))),
        audit('bad', 'x'.repeat(200)).catch((e: unknown) => e),
        Promise.all(['a1', 'a2'].map((t) => audit(t))),
      ]);
      await first;
      expect(recs).toEqual([1, 1]);
      expect(String(bad)).toMatch(/too long/i);
      expect(rest.map((a) => a.target)).toEqual(['a1', 'a2']);
      expect((await store.listAudit()).map((a) => a.target).sort()).toEqual(['a1', 'a2', 'first']);
      expect((await store.listSandboxes()).map((s) => s.sandboxID)).toEqual(['r1', 'r2']);
    }));

  it('a batch whose connection drops before MariaDB got it: its records are written on their own, its audit rows answer 503 and are not written', async () => {
    // The batch never reaches MariaDB (the relay drops both sides when it sees it).
    const relay = await commitCutter(async (client, server) => {
      server.destroy();
      client.destroy();
    }, 'START TRANSACTION');
    const { store, cleanup } = await relayedStore(relay);
    try {
      await store.init();
      const audit = (target: string) => store.appendAudit({ at: 't', actor: 'k', action: 'sandbox.create', target, outcome: 'ok' });
      const first = audit('alone');
      const [recs, audits] = await Promise.all([
        Promise.all(['c1', 'c2'].map((id) => store.putSandbox(sandboxRecord(id)))),
        Promise.all(['x1', 'x2'].map((t) => audit(t).catch((e: unknown) => e))),
      ]);
      await first;
      expect(recs).toEqual([1, 1]);
      for (const e of audits) expect(e).toMatchObject({ kind: 'STATE_UNAVAILABLE', code: 130594 });
      expect((await store.listAudit()).map((a) => a.target)).toEqual(['alone']);
      expect((await store.listSandboxes()).map((s) => [s.sandboxID, s.generation])).toEqual([
        ['c1', 1],
        ['c2', 1],
      ]);
    } finally {
      await cleanup();
      await relay.close();
    }
  });

  it("a replica fetches only the node views whose version moved since it last read or wrote them; another replica's writes, deletes and expiries are seen at once", async () => {
    const scope = clusterStateScope();
    const [a, b] = [new ClusterStore(scope), new ClusterStore(scope)];
    try {
      await Promise.all([a.init(), b.init()]);
      // The views B fetches (its version reads are metric-ver keys, not counted).
      const fetched: string[] = [];
      const redis = b.live.redis as unknown as { mget: (...keys: string[]) => Promise<(string | null)[]> };
      const mget = redis.mget.bind(redis);
      redis.mget = (...keys) => {
        fetched.push(...keys.filter((k) => k.includes(':metric:')).map((k) => k.split(':').at(-1)!));
        return mget(...keys);
      };
      const view = (nodeID: string, lastSeen: string) => ({ nodeID, lastSeen: Date.parse(lastSeen) }) as NodeView;
      const ids = ['n1', 'n2', 'n3'];
      await a.putNodeMetrics(
        ids.map((id) => view(id, '2026-01-01T00:00:01.000Z')),
        60_000,
      );
      expect([...(await b.getNodeMetrics(ids)).keys()]).toEqual(ids);
      expect(fetched.sort()).toEqual(ids);
      fetched.length = 0;
      const again = await b.getNodeMetrics(ids);
      expect(fetched).toEqual([]);
      expect(again.get('n2')?.lastSeen).toBe(Date.parse('2026-01-01T00:00:01.000Z'));
      // Another replica's write of one view: that one is fetched, the others are not.
      await a.putNodeMetrics([view('n2', '2026-01-01T00:00:05.000Z')], 60_000);
      expect((await b.getNodeMetrics(ids)).get('n2')?.lastSeen).toBe(Date.parse('2026-01-01T00:00:05.000Z'));
      expect(fetched).toEqual(['n2']);
      // B's own write: its next read fetches nothing.
      fetched.length = 0;
      await b.putNodeMetrics([view('n1', '2026-01-01T00:00:06.000Z')], 60_000);
      expect((await b.getNodeMetrics(ids)).get('n1')?.lastSeen).toBe(Date.parse('2026-01-01T00:00:06.000Z'));
      expect(fetched).toEqual([]);
      // Deleted (the node left the registry) by A, expired: gone from B's next read.
      await a.deleteNode('n3');
      await a.putNodeMetrics([view('n1', '2026-01-01T00:00:07.000Z')], 100);
      await sleep(200);
      expect([...(await b.getNodeMetrics(ids)).keys()]).toEqual(['n2']);
    } finally {
      await a.close();
      await b.close();
      await scope.drop();
    }
  });

  it("a config compare-and-set retried after its connection dropped before COMMIT does not take another replica's write of the same version, time and actor for its own", async () => {
    const scope = clusterStateScope();
    const other = new ClusterStore(scope);
    const rec = (by: string) => ({ version: 2, at: '2026-12-01T21:00:00.000Z', actor: 'key-ops', reason: 'set x', master: { by }, cubelet: {} });
    // A's COMMIT never reaches MariaDB (its transaction rolls back with the connection); B's
    // change, the same version, time and actor with other content, commits before A retries.
    const cutter = await commitCutter(async (client, server) => {
      server.destroy();
      expect(await other.casConfigHead(rec('b'), 1)).toBe(true);
      client.destroy();
    });
    const a = new ClusterStore({ ...scope, mysqlURL: cutter.url(new URL(scope.mysqlURL).pathname.slice(1)) });
    try {
      await other.init();
      await a.init();
      expect(await other.casConfigHead({ ...rec('seed'), version: 1 }, 0)).toBe(true);
      expect(await a.casConfigHead(rec('a'), 1)).toBe(false);
      expect(await a.configHead()).toMatchObject({ version: 2, master: { by: 'b' } });
      expect((await a.listConfigVersions()).map((v) => `${v.version} ${(v.master as { by: string }).by}`)).toEqual(['2 b', '1 seed']);
    } finally {
      await a.close();
      await other.close();
      await cutter.close();
      await scope.drop();
    }
  });

  it('a config compare-and-set whose COMMIT answer was lost is retried and finds its own write: true, written once', async () => {
    const scope = clusterStateScope();
    const cutter = await commitCutter(async (client, server, commit) => {
      server.removeAllListeners('data');
      server.once('data', () => client.destroy());
      server.write(commit);
    });
    const a = new ClusterStore({ ...scope, mysqlURL: cutter.url(new URL(scope.mysqlURL).pathname.slice(1)) });
    try {
      await a.init();
      const rec = { version: 1, at: '2026-12-01T21:00:00.000Z', actor: 'key-ops', reason: 'set x', master: { by: 'a' }, cubelet: {} };
      expect(await a.casConfigHead(rec, 0)).toBe(true);
      expect(await a.configHead()).toMatchObject({ version: 1, master: { by: 'a' } });
      expect((await a.listConfigVersions()).map((v) => v.version)).toEqual([1]);
    } finally {
      await a.close();
      await cutter.close();
      await scope.drop();
    }
  });

  it('migrations are idempotent and two replicas share one state', async () => {
    const scope = clusterStateScope();
    const a = new ClusterStore(scope);
    const b = new ClusterStore(scope);
    try {
      await Promise.all([a.init(), b.init()]);
      await a.putSandbox(sandboxRecord('s1'));
      expect((await b.getSandbox('s1'))?.accessToken).toBe('tok-s1');
      const ev = await b.appendEvent({ at: 1, kind: 'node.joined', nodeID: 'n', message: 'joined' });
      expect((await a.listEvents({ sinceID: ev.id - 1 })).map((e) => e.message)).toEqual(['joined']);
      await a.close();
      const c = new ClusterStore(scope);
      await c.init();
      expect((await c.listSandboxes()).map((s) => s.sandboxID)).toEqual(['s1']);
      await c.close();
    } finally {
      await a.close().catch(() => undefined);
      await b.close().catch(() => undefined);
      await scope.drop();
    }
  });

  it('two replicas admit no more than a key quota together: 24 claims at once through two stores, 5 admitted', async () => {
    const scope = clusterStateScope();
    const a = new ClusterStore(scope);
    const b = new ClusterStore(scope);
    try {
      await Promise.all([a.init(), b.init()]);
      const limits = { sandboxes: 5, vcpus: 0, memory_mib: 0, creates_per_sec: 0 };
      const answers = await Promise.all(
        Array.from({ length: 24 }, (_, i) =>
          (i % 2 ? a : b).claimQuota({ owner: 'key-x', sandboxID: `s${i}`, cpus: 1, memoryMiB: 256, limits, ttlMs: 60_000 }),
        ),
      );
      expect(answers.filter((r) => r === undefined)).toHaveLength(5);
      expect(answers.filter((r) => r !== undefined).every((r) => r!.quota === 'sandboxes' && r!.limit === 5)).toBe(true);
      expect((await b.quotaUsage(['key-x'])).get('key-x')).toEqual({ sandboxes: 5, vcpus: 5, memoryMiB: 1280 });
    } finally {
      await a.close().catch(() => undefined);
      await b.close().catch(() => undefined);
      await scope.drop();
    }
  });

  it('a read retried across a reconnect to a Redis that came back empty finds the record (routes rebuilt from MySQL), never a miss: a miss was a 404 for a sandbox that exists (issue 24)', () =>
    withStore(async (store) => {
      await store.putSandbox(sandboxRecord('w1', { state: 'running' }));
      // No wait for the reconnect: the read is under way (retried on the dropped connection) when Redis is back.
      await wipeRedis(store, { disconnect: true });
      const reads = await Promise.all(
        [store.getSandbox('w1'), sleep(20).then(() => store.getSandbox('w1')), sleep(60).then(() => store.getSandbox('w1'))].map((p) =>
          p.catch((e: unknown) => (e as Error).message),
        ),
      );
      // A read may answer 503 (Redis away for all its retries); none may answer nothing.
      for (const r of reads) expect(r === undefined ? 'a miss' : typeof r === 'string' ? r : r.sandboxID).toMatch(/^(w1|Redis unavailable.*)$/);
      expect((await store.getSandbox('w1'))?.sandboxID).toBe('w1');
    }));

  it('key quota usage comes back with the routes after Redis restarts empty, and a version that did not count it is counted at start', () =>
    withStore(async (store) => {
      await store.putSandbox(sandboxRecord('q1', { owner: 'key-q', state: 'running' }));
      await store.putSandbox(sandboxRecord('q2', { owner: 'key-q', state: 'paused' }));
      const usage = async () => (await store.quotaUsage(['key-q'])).get('key-q');
      expect(await usage()).toEqual({ sandboxes: 1, vcpus: 1, memoryMiB: 256 });
      await wipeRedis(store, { disconnect: true });
      let u: unknown;
      for (let i = 0; i < 50 && !(u as { sandboxes?: number } | undefined)?.sandboxes; i++) {
        u = await usage().catch(() => undefined);
        if (!(u as { sandboxes?: number } | undefined)?.sandboxes) await sleep(100);
      }
      expect(u).toEqual({ sandboxes: 1, vcpus: 1, memoryMiB: 256 });
      // The counters gone but the routes there (written by a version before quotas): recounted when the routes are rebuilt.
      const admin = new Redis(REDIS_URL);
      try {
        await admin.del(`${(store.live as unknown as { prefix: string }).prefix}shared:quota-usage`);
      } finally {
        admin.disconnect();
      }
      await store.reconcileRoutes();
      expect(await usage()).toEqual({ sandboxes: 1, vcpus: 1, memoryMiB: 256 });
    }));

  it("a made sandbox's create deadline (the mark of a create not yet answered) stays on its route until markAnswered, and no later write brings it back; MySQL keeps it; a route repaired over the one a dead writer left keeps it, one rebuilt into an empty Redis does not", () =>
    withStore(async (store) => {
      const createBy = Date.now() + 10_000;
      const pending = await store.putSandbox(sandboxRecord('m1', { state: 'creating', createBy }));
      expect((await store.getSandbox('m1'))?.createBy).toBe(createBy);
      // Its writer: MySQL, then the route, both marked until the answer is out.
      const written = await store.putSandboxIf(sandboxRecord('m1', { createBy }), pending);
      expect((await store.getSandbox('m1'))?.createBy).toBe(createBy);
      await store.markAnswered('m1');
      const answered = await store.getSandbox('m1');
      expect({ createBy: answered?.createBy, generation: answered?.generation, state: answered?.state }).toEqual({
        createBy: undefined,
        generation: written,
        state: 'running',
      });
      expect((await store.getSandboxForWrite('m1'))?.createBy).toBe(createBy);
      // A heartbeat that read the marked record before the answer writes it later: the mark stays gone.
      const later = await store.putSandboxIf(sandboxRecord('m1', { createBy, ip: '10.0.0.9' }), written);
      expect(await store.getSandbox('m1')).toMatchObject({ ip: '10.0.0.9', generation: later });
      expect((await store.getSandbox('m1'))?.createBy).toBeUndefined();
      // Labels named like the record's fields decide nothing.
      await store.putSandbox(sandboxRecord('m3', { state: 'creating', createBy, metadata: { state: 'creating', createBy: '1' } }));
      await store.putSandboxIf(sandboxRecord('m3', { createBy, metadata: { state: 'creating', createBy: '1' } }), 1);
      await store.markAnswered('m3');
      expect(await store.getSandbox('m3')).toMatchObject({ metadata: { state: 'creating', createBy: '1' } });
      expect((await store.getSandbox('m3'))?.createBy).toBeUndefined();
      // A writer killed between MySQL and Redis: the route still says creating; the repair keeps the mark.
      await store.putSandbox(sandboxRecord('m2', { state: 'creating', createBy }));
      await store.mysql.putSandboxIf(sandboxRecord('m2', { createBy }), 1);
      await store.reconcileRoutes();
      expect(await store.getSandbox('m2')).toMatchObject({ state: 'running', createBy });
      // Redis emptied: whether they were answered is not known, and none is marked.
      await wipeRedis(store);
      await store.reconcileRoutes();
      expect([(await store.getSandbox('m1'))?.createBy, (await store.getSandbox('m2'))?.createBy, (await store.getSandbox('m2'))?.state]).toEqual([
        undefined,
        undefined,
        'running',
      ]);
      expect(written).toBeGreaterThan(pending);
    }));

  it('concurrent appends go in batches: consecutive ids in call order, in Redis and in MySQL', () =>
    withStore(async (store) => {
      const first = await store.appendEvent({ at: 1, kind: 'node.joined', nodeID: 'n', message: 'first' });
      const evs = await Promise.all(Array.from({ length: 40 }, (_, i) => store.appendEvent({ at: 1, kind: 'sandbox.created', nodeID: 'n', message: `e${i}` })));
      expect(evs.map((e) => e.id)).toEqual(Array.from({ length: 40 }, (_, i) => first.id + 1 + i));
      expect((await store.listEvents({ sinceID: first.id })).map((e) => `${e.id} ${e.message}`)).toEqual(evs.map((e) => `${e.id} ${e.message}`));
      expect((await store.mysql.latestEvents(41)).events.map((e) => e.message)).toEqual(['first', ...evs.map((e) => e.message)]);
    }));

  it('records an older version wrote (ISO 8601 times) load with epoch ms times, from MySQL and from a Redis route', () =>
    withStore(async (store) => {
      await store.putSandbox(sandboxRecord('old'));
      await store.putSandbox({ ...sandboxRecord('new'), startedAt: EPOCH_TIMES.startedAt + 1 });
      const pool = (store.mysql as unknown as { pool: { query(sql: string, args: unknown[]): Promise<unknown> } }).pool;
      await pool.query('UPDATE sandbox_history SET record = ? WHERE sandbox_id = ?', [legacyRecordJson('old'), 'old']);
      const prefix = (store.live as unknown as { prefix: string }).prefix;
      await store.live.redis.hset(`${prefix}shared:sandboxes`, 'old', legacyRecordJson('old', { generation: 1 }));
      expect(await store.mysql.getLiveSandbox('old')).toMatchObject({ sandboxID: 'old', ...EPOCH_TIMES });
      expect((await store.mysql.liveSandboxes()).find((r) => r.sandboxID === 'old')).toMatchObject(EPOCH_TIMES);
      expect(await store.getSandbox('old')).toMatchObject({ sandboxID: 'old', ...EPOCH_TIMES });
      // Ordered by start time as numbers, the legacy record among new ones.
      expect((await store.listSandboxes()).map((r) => [r.sandboxID, r.startedAt])).toEqual([
        ['old', EPOCH_TIMES.startedAt],
        ['new', EPOCH_TIMES.startedAt + 1],
      ]);
    }));

  it('node times an older version wrote as ISO 8601 load as epoch ms: the registry in MySQL, a view and a heartbeat time in Redis', () =>
    withStore(async (store) => {
      const pool = (store.mysql as unknown as { pool: { query(sql: string, args: unknown[]): Promise<unknown> } }).pool;
      await pool.query('INSERT INTO nodes (node_id, record) VALUES (?, ?)', ['n1', LEGACY_NODE_JSON]);
      expect(await store.getNode('n1')).toEqual(EPOCH_NODE);
      expect(await store.listNodes()).toEqual([EPOCH_NODE]);
      const prefix = (store.live as unknown as { prefix: string }).prefix;
      const seen = Date.parse('2026-01-01T00:00:05.000Z');
      await store.live.redis.set(
        `${prefix}master:node:metric:n1`,
        JSON.stringify({ nodeID: 'n1', lastSeen: '2026-01-01T00:00:05.000Z', evictAt: '2026-01-01T00:10:00.000Z' }),
        'PX',
        60_000,
      );
      expect((await store.getNodeMetrics(['n1'])).get('n1')).toEqual({ nodeID: 'n1', lastSeen: seen, evictAt: EPOCH_NODE.evictAt });
      // A heartbeat time an older replica recorded beside it (touchNodeMetrics), later than the view's.
      await store.live.redis.hset(`${prefix}master:node:seen`, 'n1', '2026-01-01T00:00:06.000Z');
      expect((await store.getNodeMetrics(['n1'])).get('n1')?.lastSeen).toBe(seen + 1000);
      expect(await store.touchNodeMetrics([{ nodeID: 'n1', lastSeen: seen + 2000 }], 60_000)).toEqual([]);
      expect((await store.getNodeMetrics(['n1'])).get('n1')?.lastSeen).toBe(seen + 2000);
    }));

  it('events an older version wrote (ISO 8601 times) load as epoch ms, from the Redis stream and from MySQL', () =>
    withStore(async (store) => {
      const pool = (store.mysql as unknown as { pool: { query(sql: string, args: unknown[]): Promise<unknown> } }).pool;
      const prefix = (store.live as unknown as { prefix: string }).prefix;
      const mine = await store.appendEvent({ at: EPOCH_EVENT_AT + 1, kind: 'node.joined', nodeID: 'n2', message: 'new' });
      await store.live.redis.xadd(`${prefix}shared:events`, `${mine.id + 1}-0`, 'e', LEGACY_EVENT_BODY);
      await store.live.redis.set(`${prefix}shared:events:seq`, String(mine.id + 1));
      await pool.query('INSERT INTO events (id, body) VALUES (?, ?)', [mine.id + 1, LEGACY_EVENT_BODY]);
      expect((await store.listEvents({ sinceID: mine.id - 1 })).map((e) => [e.message, e.at])).toEqual([
        ['new', EPOCH_EVENT_AT + 1],
        ['old', EPOCH_EVENT_AT],
      ]);
      expect((await store.mysql.latestEvents(1)).events.map((e) => [e.message, e.at])).toEqual([['old', EPOCH_EVENT_AT]]);
    }));

  it('a snapshot record an older version wrote (ISO 8601 createdAt) loads as epoch ms and sorts before one taken since', () =>
    withStore(async (store) => {
      const pool = (store.mysql as unknown as { pool: { query(sql: string, args: unknown[]): Promise<unknown> } }).pool;
      await pool.query('INSERT INTO snapshots (snapshot_id, node_id, created_at, record) VALUES (?, ?, ?, ?)', [
        LEGACY_SNAPSHOT.id,
        'node-a',
        LEGACY_SNAPSHOT.createdAt,
        LEGACY_SNAPSHOT.json,
      ]);
      const old = Date.parse(LEGACY_SNAPSHOT.createdAt);
      await store.putSnapshot(snapshotRecord('snap-new', old + 1));
      expect(await store.getSnapshot(LEGACY_SNAPSHOT.id)).toEqual(snapshotRecord(LEGACY_SNAPSHOT.id, old));
      expect((await store.listSnapshots()).map((x) => [x.snapshotID, x.createdAt])).toEqual([
        [LEGACY_SNAPSHOT.id, old],
        ['snap-new', old + 1],
      ]);
    }));

  it('a fencing counter Redis lost starts above every token handed out before', () =>
    withStore(async (store) => {
      const before = Number(await store.acquireLock('sbx', 5000));
      await wipeRedis(store);
      expect(Number(await store.acquireLock('sbx', 5000))).toBeGreaterThan(before);
    }));

  it('routes rebuilt from a MySQL snapshot keep writes newer than it and sandboxes created since; deleted ones go', () =>
    withStore(async (store) => {
      await store.putSandbox(sandboxRecord('a'));
      const snapshot = await store.mysql.liveSandboxes();
      expect(await store.putSandboxIf({ ...sandboxRecord('a'), state: 'paused' }, 1)).toBe(2);
      await store.putSandbox(sandboxRecord('b'));
      await store.live.replaceRoutes(snapshot, []);
      expect(await store.live.getRoute('a')).toMatchObject({ state: 'paused', generation: 2 });
      expect(await store.live.getRoute('b')).toBeDefined();
      // A route left behind by a delete whose Redis half failed: the reconcile removes it, keeps the rest.
      await store.putSandbox(sandboxRecord('c'));
      await store.mysql.markSandboxDeleted('c');
      await store.reconcileRoutes();
      expect((await store.live.listRoutes()).map((r) => r.sandboxID).sort()).toEqual(['a', 'b']);
      expect(await store.live.getRoute('a')).toMatchObject({ state: 'paused', generation: 2 });
    }));

  it('a refused compare-and-set brings a route that lags MySQL up to it (a replica died between the two writes)', () =>
    withStore(async (store) => {
      expect(await store.putSandbox({ ...sandboxRecord('a'), state: 'creating' })).toBe(1);
      // The dying replica's MySQL half: running, generation 2; its route stays creating at 1.
      expect(await store.mysql.putSandboxIf(sandboxRecord('a'), 1)).toBe(2);
      expect(await store.getSandbox('a')).toMatchObject({ state: 'creating', generation: 1 });
      // A heartbeat's update over the route's generation is refused, and the route catches up.
      expect(await store.putSandboxIf({ ...sandboxRecord('a'), state: 'paused' }, 1)).toBe(0);
      expect(await store.getSandbox('a')).toMatchObject({ state: 'running', generation: 2 });
      // Its record written, not its route: an adoption (generation 0) is refused and brings the route.
      await store.mysql.putSandbox(sandboxRecord('b'));
      expect(await store.putSandboxIf(sandboxRecord('b'), 0)).toBe(0);
      expect(await store.getSandbox('b')).toMatchObject({ state: 'running', generation: 1 });
      // Deleted in MySQL only: a refused delete takes the route out.
      await store.mysql.markSandboxDeleted('b');
      expect(await store.deleteSandboxIf('b', 1)).toBe(false);
      expect(await store.getSandbox('b')).toBeUndefined();
    }));

  it('routes lost with a Redis reconnect are rebuilt from MySQL; events keep increasing', () =>
    withStore(async (store) => {
      await store.putSandbox(sandboxRecord('keep'));
      await store.putSandbox(sandboxRecord('gone'));
      await store.deleteSandbox('gone');
      const before = await store.appendEvent({ at: 1, kind: 'sandbox.created', message: 'before' });
      await wipeRedis(store, { disconnect: true });
      let list: string[] = [];
      for (let i = 0; i < 50 && list.length === 0; i++) {
        list = await store
          .listSandboxes()
          .then((l) => l.map((s) => s.sandboxID))
          .catch(() => []);
        if (list.length === 0) await sleep(100);
      }
      expect(list).toEqual(['keep']);
      const after = await store.appendEvent({ at: 1, kind: 'sandbox.created', message: 'after' });
      expect(after.id).toBeGreaterThan(before.id);
      // The history came back from MySQL with its ids.
      expect((await store.listEvents({ limit: 10 })).map((e) => [e.id, e.message])).toEqual([
        [before.id, 'before'],
        [after.id, 'after'],
      ]);
    }));

  it('events keep their ids across a Redis that comes back empty, even for a replica that never saw them', () =>
    withStore(async (store) => {
      const first = await store.appendEvent({ at: 1, kind: 'sandbox.created', message: 'one' });
      await store.appendEvent({ at: 1, kind: 'sandbox.created', message: 'two' });
      await wipeRedis(store);
      // No reconnect seen (the keys just vanished): the append itself notices the missing counter.
      const three = await store.appendEvent({ at: 1, kind: 'sandbox.created', message: 'three' });
      expect(three.id).toBe(first.id + 2);
      expect((await store.listEvents({ limit: 10 })).map((e) => e.message)).toEqual(['one', 'two', 'three']);
    }));

  it('an unreachable backend answers 503 STATE_UNAVAILABLE, not a hang', async () => {
    const scope = clusterStateScope();
    const store = new ClusterStore({ ...scope, redisURL: 'redis://127.0.0.1:1/0' });
    try {
      const err = await store.init().catch((e: unknown) => e);
      expect(err).toBeInstanceOf(CubeError);
      expect(err).toMatchObject({ kind: 'STATE_UNAVAILABLE', http: 503, code: 130594 });
      const read = await store.getSandbox('x').catch((e: unknown) => e);
      expect(read).toMatchObject({ kind: 'STATE_UNAVAILABLE' });
    } finally {
      await store.close();
      await scope.drop();
    }
  });
});
