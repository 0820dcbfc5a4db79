// The live half of the cluster store: sandbox routes (the record, incl. its node, by id), node
// metrics with TTL, creates in flight per node, per-sandbox operation locks with token-checked
// release, leader leases, and the events stream. Keys: `<prefix><scope>:<what>[:<id>]`.
import { Redis } from 'ioredis';
import { eventWithEpochTime, isFloodKind, type EventView } from '../../model/event.js';
import { nodeWithEpochTimes, type NodeView } from '../../model/node.js';
import type { SandboxRecord } from '../../model/sandbox.js';
import { fenceFloor, parseRecord } from '../types.js';
import { HOLD_LUA, RedisQuota } from './redis-quota.js';
import { withRetry } from './retry.js';

// Atomic: ids come from one counter so every replica's events interleave in one order; a batch
// gets ids in its order, one per event (0 for a node's notice whose sender appended that seq
// already: the check and the append are one step, so a heartbeat resent to another replica while
// the first still works on it adds nothing twice). KEYS: the stream, the counter, and the ids of
// the lifecycle and of the flood kinds in the stream, oldest first (model/event.ts isFloodKind):
// each list keeps its newest `retention` and the stream loses what a list drops, so a flood
// pushes out only events of its own class (the stream's MAXLEN, twice the retention, trims only
// events from before these lists). ARGV: retention, the sender keys' prefix and time to live,
// then (sender or '', seq, flood 0/1, body) per event. No counter means Redis came back empty:
// -1, and the caller restores the stream and the counter from MySQL first (restoreEvents), so an
// id is never handed out twice.
const APPEND_EVENTS = `if redis.call('EXISTS', KEYS[2]) == 0 then return -1 end
local keep = tonumber(ARGV[1])
local ids = {}
for i = 4, #ARGV, 4 do
  local fresh = true
  if ARGV[i] ~= '' then
    local k = ARGV[2] .. ARGV[i]
    if tonumber(ARGV[i + 1]) <= tonumber(redis.call('GET', k) or '0') then fresh = false else redis.call('SET', k, ARGV[i + 1], 'PX', ARGV[3]) end
  end
  if fresh then
    local id = redis.call('INCR', KEYS[2])
    redis.call('XADD', KEYS[1], 'MAXLEN', tostring(2 * keep), id .. '-0', 'e', ARGV[i + 3])
    local class = KEYS[3]
    if ARGV[i + 2] == '1' then class = KEYS[4] end
    redis.call('RPUSH', class, id)
    while redis.call('LLEN', class) > keep do redis.call('XDEL', KEYS[1], redis.call('LPOP', class) .. '-0') end
    table.insert(ids, id)
  else
    table.insert(ids, 0)
  end
end
return ids`;
/** How long a heartbeat sender's last appended seq is kept (a resend comes within seconds; a sender's process that restarts numbers anew). */
const SENDER_TTL_MS = 24 * 3600_000;
// A batch of node views: KEYS[1] is the metric keys' prefix, KEYS[2] the version keys'; ARGV: time
// to live, then (node, view JSON) pairs. Each write moves the node's version (a counter beside
// the view, with the same time to live), so readers fetch only the views whose version moved
// (getNodeMetrics). Returns the new versions in order.
const PUT_METRICS = `local vers = {}
for i = 2, #ARGV, 2 do
  local v = redis.call('INCR', KEYS[2] .. ARGV[i])
  redis.call('PEXPIRE', KEYS[2] .. ARGV[i], ARGV[1])
  redis.call('SET', KEYS[1] .. ARGV[i], ARGV[i + 1], 'PX', ARGV[1])
  table.insert(vers, v)
end
return vers`;
// Heartbeats without a view (it did not change): ARGV[4..] are (node, lastSeen) pairs. Each
// node's view (and its version) is kept another ARGV[3] ms and its lastSeen recorded beside it;
// the nodes whose view is not there are returned (they send it again).
const TOUCH_METRICS = `local missing = {}
for i = 4, #ARGV, 2 do
  if redis.call('PEXPIRE', ARGV[1] .. ARGV[i], ARGV[3]) == 1 then
    redis.call('PEXPIRE', ARGV[2] .. ARGV[i], ARGV[3])
    redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
  else
    table.insert(missing, ARGV[i])
  end
end
return missing`;
// Once, by whichever replica comes first: the stream's last events, their class lists (KEYS[3],
// KEYS[4]: see APPEND_EVENTS) and the counter from MySQL. ARGV: the highest id MySQL holds, then
// (id, flood 0/1, body) oldest first.
const RESTORE_EVENTS = `if redis.call('EXISTS', KEYS[2]) == 1 then return 0 end
redis.call('DEL', KEYS[3], KEYS[4])
for i = 2, #ARGV, 3 do
  redis.call('XADD', KEYS[1], ARGV[i] .. '-0', 'e', ARGV[i + 2])
  if ARGV[i + 1] == '1' then redis.call('RPUSH', KEYS[4], ARGV[i]) else redis.call('RPUSH', KEYS[3], ARGV[i]) end
end
redis.call('SET', KEYS[2], ARGV[1])
return 1`;
const RELEASE_IF_OWNER = `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end`;
const RENEW_IF_OWNER = `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) else return 0 end`;
// A lock's token is a fencing number: every acquisition gets a larger one than any before it. A
// counter Redis lost (it restarted empty) starts again from ARGV[2], the wall clock (fenceFloor):
// from 1, every later call to a node that had accepted a higher token was refused (130491).
const ACQUIRE_FENCED = `if redis.call('EXISTS', KEYS[1]) == 1 then return false end
if redis.call('EXISTS', KEYS[2]) == 0 then redis.call('SET', KEYS[2], ARGV[2]) end
local fence = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], fence, 'PX', ARGV[1])
return fence`;
const HOLD_LEASE = `local cur = redis.call('GET', KEYS[1])
if cur == false then redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2]) return 1 end
if cur == ARGV[1] then redis.call('PEXPIRE', KEYS[1], ARGV[2]) return 1 end
return 0`;
// Routes are written after MySQL, by several replicas: an older generation arriving late, or a
// write after the delete (its tombstone), must not overwrite what is there.
// The owner's quota usage moves with the route (redis-quota.ts: KEYS[3] the usage, ARGV[4] the claims' prefix).
// A made sandbox's createBy (SandboxRecord: its create not yet answered) is written with the route
// until MARK_ANSWERED takes it out; a later write carrying it (a heartbeat that read the route
// before, a writer retrying over MySQL's copy) does not bring it back over a route without it, nor
// into an absent route (rebuilt from MySQL after Redis restarted: whether it was answered is not
// known, and undoing a sandbox a client holds is the worse error). Decoded to decide: a metadata
// label named "state" or "createBy" is text inside the JSON too. The strip edits the text, since
// cjson would round epoch-ms numbers on encoding; metadata values are strings, so the one unquoted
// number after "createBy": is the record's.
const MARK_LUA = `local function unanswered(json)
  local r = cjson.decode(json)
  return r.createBy ~= nil and r.state ~= 'creating'
end
local function answered(json) return (string.gsub(json, ',"createBy":%d+', '', 1)) end`;
const PUT_ROUTE_IF_NEWER = `${HOLD_LUA}
${MARK_LUA}
if redis.call('EXISTS', KEYS[2]) == 1 then return 0 end
local cur = redis.call('HGET', KEYS[1], ARGV[1])
local rec = ARGV[2]
if cur then
  local c = cjson.decode(cur)
  if c.generation and tonumber(c.generation) >= tonumber(ARGV[3]) then return 0 end
  if c.createBy == nil and unanswered(rec) then rec = answered(rec) end
elseif unanswered(rec) then
  rec = answered(rec)
end
redis.call('HSET', KEYS[1], ARGV[1], rec)
hold(cur, -1, KEYS[3], ARGV[4], ARGV[1])
hold(rec, 1, KEYS[3], ARGV[4], ARGV[1])
return 1`;
// The generation stays: the record is the same sandbox, only no longer waiting for its answer.
const MARK_ANSWERED = `${MARK_LUA}
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if not cur or not unanswered(cur) then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], answered(cur))
return 1`;
/** How long a deleted sandbox's tombstone keeps late route writes out (longer than any in-flight write). */
const TOMBSTONE_MS = 10 * 60_000;
// The nodes with creates in flight are kept in a set, so a placement reads the few counters that
// exist, not one per node (an MGET of 1000 keys per create was 3% of the control's CPU at 1000
// nodes); a member whose counter expired (its replica died mid-create) is dropped here.
const IN_FLIGHT = `local out = {}
for _, id in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  local v = redis.call('GET', ARGV[1] .. id)
  if v then table.insert(out, id) table.insert(out, v) else redis.call('SREM', KEYS[1], id) end
end
return out`;
// The tombstone and the removal in one command (a MULTI took a socket write of its own per delete).
// The quota its owner held goes with it (KEYS[3] the usage, ARGV[3] the claims' prefix), and so does a claim left for it.
const DELETE_ROUTE = `${HOLD_LUA}
redis.call('SET', KEYS[1], '1', 'PX', ARGV[2])
local cur = redis.call('HGET', KEYS[2], ARGV[1])
hold(cur, -1, KEYS[3], ARGV[3], ARGV[1])
if cur then
  local o = cjson.decode(cur).owner
  if type(o) == 'string' then redis.call('HDEL', ARGV[3] .. o, ARGV[1]) end
end
redis.call('HDEL', KEYS[2], ARGV[1])
return 1`;
// One command, not a MULTI: ioredis writes a MULTI on its own, while commands issued together
// share one socket write (auto-pipelining); a MULTI here was 6.8% of the control's busy CPU during
// the creates of the 1000-node bench.
const INC_IN_FLIGHT = `local n = redis.call('INCR', KEYS[1]) redis.call('PEXPIRE', KEYS[1], ARGV[1]) redis.call('SADD', KEYS[2], ARGV[2]) return n`;
const DECR_FLOOR = `local v = redis.call('DECR', KEYS[1]) if v <= 0 then redis.call('DEL', KEYS[1]) return 0 end return v`;

export class RedisLive {
  readonly redis: Redis;
  /**
   * Each node's metrics as last read or written here, raw and parsed: a read whose raw JSON did not
   * change reuses the parsed view. Placement reads all 1000 nodes' metrics every 250 ms, and parsing
   * them was the largest single cost left in the control (6% of its CPU in the 1000-node bench);
   * the heartbeat batch this replica writes fills it, so its next reads parse nothing.
   */
  private readonly parsedMetrics = new Map<string, { raw: string; view: NodeView; ver?: string; seen?: string; merged?: NodeView }>();
  /**
   * The routes as last listed, raw and parsed: every heartbeat batch lists them all (to reconcile
   * each node's records), and re-parsing every sandbox's record each second grows with the
   * sandboxes (2.9% of the control's CPU with 650 of them in the 1000-node bench).
   */
  private parsedRoutes = new Map<string, { raw: string; rec: SandboxRecord }>();

  constructor(
    url: string,
    private readonly prefix: string,
    private readonly eventRetention: number,
  ) {
    // No offline queue: while Redis is down a command fails at once (503) instead of hanging.
    // Auto-pipelining: the commands issued in one event-loop turn (concurrent creates, the
    // heartbeat's) go out in one socket write; one write per command was the largest single cost
    // of the control in the 1000-node bench (socket writes 21% of its CPU, mostly Redis and MySQL).
    // The mark of an answered create is written in the call that makes it, right after the answer
    // (control/sandboxes.ts answered()), not in the next tick's batch.
    this.redis = new Redis(url, {
      lazyConnect: true,
      enableOfflineQueue: false,
      enableAutoPipelining: true,
      autoPipeliningIgnoredCommands: ['cubeMarkAnswered'],
      maxRetriesPerRequest: 1,
      connectTimeout: 2000,
      retryStrategy: (n) => Math.min(100 * n, 2000),
    });
    this.redis.on('error', () => undefined); // reported through the failing commands
    this.redis.defineCommand('cubeAppendEvents', { numberOfKeys: 4, lua: APPEND_EVENTS });
    this.redis.defineCommand('cubeReleaseIfOwner', { numberOfKeys: 1, lua: RELEASE_IF_OWNER });
    this.redis.defineCommand('cubeRenewIfOwner', { numberOfKeys: 1, lua: RENEW_IF_OWNER });
    this.redis.defineCommand('cubeAcquireFenced', { numberOfKeys: 2, lua: ACQUIRE_FENCED });
    this.redis.defineCommand('cubeHoldLease', { numberOfKeys: 1, lua: HOLD_LEASE });
    this.redis.defineCommand('cubeRestoreEvents', { numberOfKeys: 4, lua: RESTORE_EVENTS });
    this.redis.defineCommand('cubeDeleteRoute', { numberOfKeys: 3, lua: DELETE_ROUTE });
    this.redis.defineCommand('cubeIncInFlight', { numberOfKeys: 2, lua: INC_IN_FLIGHT });
    this.redis.defineCommand('cubeDecrFloor', { numberOfKeys: 1, lua: DECR_FLOOR });
    this.redis.defineCommand('cubePutRouteIfNewer', { numberOfKeys: 3, lua: PUT_ROUTE_IF_NEWER });
    this.redis.defineCommand('cubeMarkAnswered', { numberOfKeys: 1, lua: MARK_ANSWERED });
    RedisQuota.define(this.redis);
    this.redis.defineCommand('cubeInFlight', { numberOfKeys: 1, lua: IN_FLIGHT });
    this.redis.defineCommand('cubeTouchMetrics', { numberOfKeys: 1, lua: TOUCH_METRICS });
    this.redis.defineCommand('cubePutMetrics', { numberOfKeys: 2, lua: PUT_METRICS });
  }

  /** API-key quota usage and claims, kept beside the routes. */
  readonly quota = new RedisQuota(
    (op, idempotent) => this.run(op, idempotent),
    (...parts) => this.k(...parts),
  );

  private k(...parts: string[]): string {
    return this.prefix + parts.join(':');
  }

  private run<T>(op: (r: Redis & Record<string, (...a: unknown[]) => Promise<unknown>>) => Promise<T>, idempotent = true): Promise<T> {
    return withRetry('Redis', () => op(this.redis as Redis & Record<string, (...a: unknown[]) => Promise<unknown>>), idempotent);
  }

  async init(): Promise<void> {
    await this.redis.connect();
  }

  async close(): Promise<void> {
    this.redis.disconnect();
  }

  // --- sandbox routes
  /** Writes the route unless a newer generation is there or the sandbox was deleted. */
  async putRoute(rec: SandboxRecord & { generation: number }): Promise<void> {
    await this.run((r) =>
      r.cubePutRouteIfNewer!(
        this.k('shared', 'sandboxes'),
        this.k('shared', 'deleted', rec.sandboxID),
        this.quota.usageKey,
        rec.sandboxID,
        JSON.stringify(rec),
        rec.generation,
        this.quota.claimsPrefix,
      ),
    );
  }

  async markAnswered(sandboxID: string): Promise<void> {
    await this.run((r) => r.cubeMarkAnswered!(this.k('shared', 'sandboxes'), sandboxID));
  }

  async getRoute(sandboxID: string): Promise<SandboxRecord | undefined> {
    const v = await this.run((r) => r.hget(this.k('shared', 'sandboxes'), sandboxID));
    return v ? parseRecord(v) : undefined;
  }

  /** Every route; records whose JSON did not change since the last read are the same (read-only) objects. */
  async listRoutes(): Promise<SandboxRecord[]> {
    const all = await this.run((r) => r.hgetall(this.k('shared', 'sandboxes')));
    const out: SandboxRecord[] = [];
    const parsed = new Map<string, { raw: string; rec: SandboxRecord }>();
    for (const id in all) {
      const raw = all[id]!;
      const known = this.parsedRoutes.get(id);
      const entry = known?.raw === raw ? known : { raw, rec: parseRecord(raw) };
      parsed.set(id, entry);
      out.push(entry.rec);
    }
    this.parsedRoutes = parsed;
    return out;
  }

  async deleteRoute(sandboxID: string): Promise<void> {
    await this.run((r) =>
      r.cubeDeleteRoute!(
        this.k('shared', 'deleted', sandboxID),
        this.k('shared', 'sandboxes'),
        this.quota.usageKey,
        sandboxID,
        TOMBSTONE_MS,
        this.quota.claimsPrefix,
      ),
    );
  }

  async routeIDs(): Promise<string[]> {
    return this.run((r) => r.hkeys(this.k('shared', 'sandboxes')));
  }

  /**
   * Rebuilds the routes from a MySQL snapshot (after a Redis restart or a half-done write): each
   * record goes in unless the route holds a newer generation, and the `deleted` ones go out. Not a
   * blind overwrite: writes landing while the snapshot was read are newer than it (a route set
   * back to the snapshot's generation made every compare-and-set retried over it fail).
   */
  async replaceRoutes(live: SandboxRecord[], deleted: string[]): Promise<void> {
    const key = this.k('shared', 'sandboxes');
    await this.run(() => {
      const p = this.redis.pipeline() as unknown as Record<string, (...a: unknown[]) => unknown> & { exec(): Promise<unknown> };
      for (const s of live)
        p.cubePutRouteIfNewer!(
          key,
          this.k('shared', 'deleted', s.sandboxID),
          this.quota.usageKey,
          s.sandboxID,
          JSON.stringify(s),
          s.generation ?? 0,
          this.quota.claimsPrefix,
        );
      for (const id of deleted) p.cubeDeleteRoute!(this.k('shared', 'deleted', id), key, this.quota.usageKey, id, TOMBSTONE_MS, this.quota.claimsPrefix);
      return p.exec();
    });
  }

  // --- node metrics
  /** Bumped on every change to the node registry (MySQL), so readers can keep a copy until it moves. */
  async bumpRegistryVersion(): Promise<void> {
    await this.run((r) => r.incr(this.k('shared', 'registry-version')), false);
  }

  async registryVersion(): Promise<string> {
    return (await this.run((r) => r.get(this.k('shared', 'registry-version')))) ?? '0';
  }

  /** One script call for a batch of nodes (1000 separate writes were 8% of the control's CPU under 1000 sim nodes). */
  async putNodeMetrics(views: NodeView[], ttlMs: number): Promise<void> {
    if (views.length === 0) return;
    const raws = views.map((v) => JSON.stringify(v));
    const vers = (await this.run((r) =>
      r.cubePutMetrics!(
        this.k('master', 'node', 'metric', ''),
        this.k('master', 'node', 'metric-ver', ''),
        ttlMs,
        ...views.flatMap((v, i) => [v.nodeID, raws[i]!]),
      ),
    )) as number[];
    // This replica's next read fetches none of them (unless another write moved a version since).
    views.forEach((view, i) => this.parsedMetrics.set(view.nodeID, { raw: raws[i]!, view, ver: String(vers[i]) }));
  }

  /** Heartbeats without a view: see StateStore.touchNodeMetrics. */
  async touchNodeMetrics(seen: { nodeID: string; lastSeen: number }[], ttlMs: number): Promise<string[]> {
    if (seen.length === 0) return [];
    return (await this.run((r) =>
      r.cubeTouchMetrics!(
        this.k('master', 'node', 'seen'),
        this.k('master', 'node', 'metric', ''),
        this.k('master', 'node', 'metric-ver', ''),
        ttlMs,
        ...seen.flatMap((s) => [s.nodeID, s.lastSeen]),
      ),
    )) as string[];
  }

  /**
   * The nodes' last reported views (those whose metrics have not expired), with the lastSeen of
   * their latest heartbeat (touchNodeMetrics) where it is later than the view's. Views are shared
   * between reads: read-only. Only the views whose version moved since this replica last read or
   * wrote them are fetched: placement reads every node's every 250 ms while creates come, and
   * fetching all 1000 views (900 bytes each) cost 11 ms of the control's CPU per read on this
   * machine (the versions and lastSeens: under 3 ms). A version missing (expired with its view,
   * deleted, or a view written without one) fetches the view.
   */
  async getNodeMetrics(nodeIDs: string[]): Promise<Map<string, NodeView>> {
    if (nodeIDs.length === 0) return new Map();
    const [vers, seen] = await Promise.all([
      this.run((r) => r.mget(...nodeIDs.map((id) => this.k('master', 'node', 'metric-ver', id)))),
      this.run((r) => r.hmget(this.k('master', 'node', 'seen'), ...nodeIDs)),
    ]);
    const stale = nodeIDs.flatMap((id, i) => (vers[i] === null || this.parsedMetrics.get(id)?.ver !== vers[i] ? [i] : []));
    if (stale.length > 0) {
      const raws = await this.run((r) => r.mget(...stale.map((i) => this.k('master', 'node', 'metric', nodeIDs[i]!))));
      stale.forEach((i, j) => {
        const id = nodeIDs[i]!;
        const raw = raws[j];
        if (!raw) return void this.parsedMetrics.delete(id);
        const known = this.parsedMetrics.get(id);
        // A view written between the two reads is newer than the version read: fetched again next time.
        if (known?.raw === raw) known.ver = vers[i] ?? undefined;
        else this.parsedMetrics.set(id, { raw, view: nodeWithEpochTimes(JSON.parse(raw) as NodeView), ver: vers[i] ?? undefined });
      });
    }
    const out = new Map<string, NodeView>();
    nodeIDs.forEach((id, i) => {
      const known = this.parsedMetrics.get(id);
      if (!known) return;
      const at = seen[i];
      if (!at) return out.set(id, known.view);
      if (known.seen !== at) {
        // Epoch ms; ISO 8601 where a replica of the version before wrote it.
        const ms = /^\d+$/.test(at) ? Number(at) : Date.parse(at);
        [known.seen, known.merged] = [at, ms > known.view.lastSeen ? { ...known.view, lastSeen: ms } : known.view];
      }
      out.set(id, known.merged!);
    });
    return out;
  }

  async deleteNodeMetrics(nodeID: string): Promise<void> {
    this.parsedMetrics.delete(nodeID);
    await this.run(() =>
      this.redis
        .multi()
        .del(
          this.k('master', 'node', 'metric', nodeID),
          this.k('master', 'node', 'metric-ver', nodeID),
          this.k('master', 'node', 'inflight', nodeID),
          this.k('master', 'node', 'lost', nodeID),
        )
        .hdel(this.k('master', 'node', 'seen'), nodeID)
        .exec(),
    );
  }

  // --- template builds handed to nodes: which node runs each (JSON, kept `ttlMs`), and each template's newest
  async putBuild(buildID: string, json: string, ttlMs: number, newestOf?: string): Promise<void> {
    await this.run((r) => {
      const m = r.multi().set(this.k('shared', 'build', buildID), json, 'PX', ttlMs);
      if (newestOf !== undefined) m.set(this.k('shared', 'build-of', newestOf), buildID, 'PX', ttlMs);
      return m.exec();
    });
  }

  async getBuild(buildID: string): Promise<string | undefined> {
    return (await this.run((r) => r.get(this.k('shared', 'build', buildID)))) ?? undefined;
  }

  async latestBuild(templateID: string): Promise<string | undefined> {
    return (await this.run((r) => r.get(this.k('shared', 'build-of', templateID)))) ?? undefined;
  }

  /** Marks a node lost; true only for the call that changed it (so one node.lost event). */
  async markNodeLost(nodeID: string): Promise<boolean> {
    return (await this.run((r) => r.set(this.k('master', 'node', 'lost', nodeID), '1', 'NX'))) === 'OK';
  }

  async clearNodeLost(nodeID: string): Promise<void> {
    await this.run((r) => r.del(this.k('master', 'node', 'lost', nodeID)));
  }

  async lostNodes(nodeIDs: string[]): Promise<Set<string>> {
    if (nodeIDs.length === 0) return new Set();
    const vals = await this.run((r) => r.mget(...nodeIDs.map((id) => this.k('master', 'node', 'lost', id))));
    return new Set(nodeIDs.filter((_, i) => vals[i] !== null));
  }

  // --- creates in flight, shared by every control replica
  async incInFlight(nodeID: string): Promise<number> {
    return Number(
      await this.run((r) => r.cubeIncInFlight!(this.k('master', 'node', 'inflight', nodeID), this.k('master', 'inflight-nodes'), 120_000, nodeID), false),
    );
  }

  async decInFlight(nodeID: string): Promise<void> {
    await this.run((r) => r.cubeDecrFloor!(this.k('master', 'node', 'inflight', nodeID)), false);
  }

  /** Creates in flight per node, every replica's; nodes without any are absent. */
  async inFlight(): Promise<Map<string, number>> {
    const flat = (await this.run((r) => r.cubeInFlight!(this.k('master', 'inflight-nodes'), this.k('master', 'node', 'inflight', '')))) as string[];
    const out = new Map<string, number>();
    for (let i = 0; i < flat.length; i += 2) out.set(flat[i]!, Number(flat[i + 1]));
    return out;
  }

  // --- per-sandbox operation locks: leases of `ttlMs` that their holder renews while it works
  /**
   * Returns the token to renew and release with (a fencing number, larger than any token handed
   * out before), or undefined when another operation holds the lock.
   */
  async acquireLock(sandboxID: string, ttlMs: number): Promise<string | undefined> {
    const fence = await this.run(
      (r) => r.cubeAcquireFenced!(this.k('master', 'lock', 'sandbox', sandboxID), this.k('master', 'lock', 'fence'), ttlMs, fenceFloor()),
      false,
    );
    return fence === null || fence === undefined ? undefined : String(fence);
  }

  /** Extends the lease by `ttlMs` if `token` still holds it; false when it lapsed (and may be someone else's). */
  async renewLock(sandboxID: string, token: string, ttlMs: number): Promise<boolean> {
    return (await this.run((r) => r.cubeRenewIfOwner!(this.k('master', 'lock', 'sandbox', sandboxID), token, ttlMs))) === 1;
  }

  /** Releases only if `token` still owns the lock (an expired lock taken by someone else stays theirs). */
  async releaseLock(sandboxID: string, token: string): Promise<boolean> {
    return (await this.run((r) => r.cubeReleaseIfOwner!(this.k('master', 'lock', 'sandbox', sandboxID), token))) === 1;
  }

  // --- leader lease
  /** Takes or extends the lease `name` for `holder`; false while someone else holds it. */
  async holdLease(name: string, holder: string, ttlMs: number): Promise<boolean> {
    return (await this.run((r) => r.cubeHoldLease!(this.k('shared', 'lease', name), holder, ttlMs))) === 1;
  }

  /** Releases lease `name` only if `holder` still holds it. */
  async releaseLease(name: string, holder: string): Promise<boolean> {
    return (await this.run((r) => r.cubeReleaseIfOwner!(this.k('shared', 'lease', name), holder))) === 1;
  }

  // --- events (MySQL keeps them; this is the stream clients read and the id counter)
  /**
   * The events numbered in order (one script call for the batch; undefined in place of a node's
   * notice its sender appended already), or undefined when Redis lost the counter (restoreEvents first).
   */
  async appendEvents(es: { e: Omit<EventView, 'id'>; origin?: { sender: string; seq: number } }[]): Promise<(EventView | undefined)[] | undefined> {
    const args = es.flatMap(({ e, origin }) => [origin?.sender ?? '', origin?.seq ?? 0, isFloodKind(e.kind) ? 1 : 0, JSON.stringify(e)]);
    const ids = await this.run(
      (r) => r.cubeAppendEvents!(...this.eventKeys(), this.eventRetention, this.k('master', 'notice-seq', ''), SENDER_TTL_MS, ...args),
      false,
    );
    if (!Array.isArray(ids)) return undefined;
    return es.map(({ e }, i) => (Number(ids[i]) > 0 ? { ...e, id: Number(ids[i]) } : undefined));
  }

  /** Whether the id counter is there (false: Redis restarted empty, or a new cluster). */
  async hasEventSeq(): Promise<boolean> {
    return (await this.run((r) => r.exists(this.k('shared', 'events', 'seq')))) === 1;
  }

  /** Restores the stream and the counter (`maxID`: the highest id ever handed out) unless another replica did. */
  async restoreEvents(maxID: number, events: EventView[]): Promise<void> {
    const args = events.flatMap(({ id, ...e }) => [String(id), isFloodKind(e.kind) ? '1' : '0', JSON.stringify(e)]);
    await this.run((r) => r.cubeRestoreEvents!(...this.eventKeys(), String(maxID), ...args));
  }

  /** The stream, the id counter, the ids of the lifecycle kinds and of the flood kinds (APPEND_EVENTS). */
  private eventKeys(): [string, string, string, string] {
    return [
      this.k('shared', 'events'),
      this.k('shared', 'events', 'seq'),
      this.k('shared', 'events', 'lifecycle-ids'),
      this.k('shared', 'events', 'flood-ids'),
    ];
  }

  async listEvents(opts: { sinceID?: number; beforeID?: number; limit?: number } = {}): Promise<EventView[]> {
    const limit = Math.max(1, Math.min(opts.limit ?? 100, 10_000));
    const key = this.k('shared', 'events');
    const entries =
      opts.sinceID !== undefined
        ? await this.run((r) => r.xrange(key, `(${opts.sinceID}-0`, '+', 'COUNT', limit))
        : (await this.run((r) => r.xrevrange(key, opts.beforeID !== undefined ? `(${opts.beforeID}-0` : '+', '-', 'COUNT', limit))).reverse();
    return entries.map(([id, fields]) => ({ ...eventWithEpochTime(JSON.parse(fields[1]!) as Omit<EventView, 'id'>), id: Number(id.split('-')[0]) }));
  }
}
