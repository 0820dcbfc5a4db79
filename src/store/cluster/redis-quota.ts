// API-key quota usage in Redis, the same for every control replica. What a key's sandboxes hold
// is kept beside the routes: the scripts that write and delete a route (redis-live.ts) move the
// owner's counters in the same step (HOLD_LUA), so the counters are exactly the routes' sum, and
// rebuilding the routes (a Redis restart) rebuilds them. Creates and resumes not recorded yet
// hold a claim (a hash per key, each entry with its deadline) that the route takes over. A
// claim is admitted by one script that reads the counters, the claims and the key's
// creates_per_sec bucket, so two replicas cannot both admit the last slot.
//
// Keys: `<prefix>shared:quota-usage` (hash: `<owner>:n`, `<owner>:mcpu`, `<owner>:mem`),
// `<prefix>shared:quota-claims:<owner>` (hash: sandboxID -> "mcpu mem deadline"),
// `<prefix>shared:quota-rate:<owner>` (hash: tokens, at).
import type { Redis } from 'ioredis';
import { HOLDING_STATES, milliCpus, type KeyUsage, type QuotaClaim, type QuotaName, type QuotaRefusal } from '../../model/api-key.js';

/**
 * Lua: hold(raw, sign, usageKey, claimsPrefix, sandboxID) adds (sign 1) or takes back (-1) what
 * the route `raw` (JSON, or false) holds of its owner's quota; a route added in a holding state
 * takes over its sandbox's claim.
 */
export const HOLD_LUA = `local HOLDING = {${HOLDING_STATES.map((s) => `['${s}'] = true`).join(', ')}}
local function hold(raw, sign, usageKey, claimsPrefix, id)
  if not raw then return end
  local r = cjson.decode(raw)
  if type(r.owner) ~= 'string' or not HOLDING[r.state] then return end
  local spec = type(r.spec) == 'table' and r.spec or {}
  local cpus = tonumber(spec.cpus) or 0
  redis.call('HINCRBY', usageKey, r.owner .. ':n', sign)
  redis.call('HINCRBY', usageKey, r.owner .. ':mcpu', sign * math.floor(cpus * 1000 + 0.5))
  redis.call('HINCRBY', usageKey, r.owner .. ':mem', sign * math.floor(tonumber(spec.memoryMiB) or 0))
  if sign > 0 then redis.call('HDEL', claimsPrefix .. r.owner, id) end
end
`;

// KEYS: usage, the owner's claims, the owner's rate bucket, routes. ARGV: owner, sandboxID,
// mcpu, mem, max sandboxes, max mcpu, max mem, creates per second, ttl ms. Returns {} when
// admitted, else {quota, used, limit, retryAfter}. The time is Redis's own (one clock for every
// replica's buckets and deadlines).
const CLAIM_QUOTA = `${HOLD_LUA}
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local owner, id = ARGV[1], ARGV[2]
local cur = redis.call('HGET', KEYS[4], id)
if cur then
  local r = cjson.decode(cur)
  if r.owner == owner and HOLDING[r.state] then return {} end
end
local n = tonumber(redis.call('HGET', KEYS[1], owner .. ':n') or '0')
local mcpu = tonumber(redis.call('HGET', KEYS[1], owner .. ':mcpu') or '0')
local mem = tonumber(redis.call('HGET', KEYS[1], owner .. ':mem') or '0')
local claims = redis.call('HGETALL', KEYS[2])
for i = 1, #claims, 2 do
  local c, m, d = string.match(claims[i + 1], '^(%S+) (%S+) (%S+)$')
  if tonumber(d) <= now then
    redis.call('HDEL', KEYS[2], claims[i])
  elseif claims[i] == id then
    return {}
  else
    n = n + 1
    mcpu = mcpu + tonumber(c)
    mem = mem + tonumber(m)
  end
end
local askC, askM = tonumber(ARGV[3]), tonumber(ARGV[4])
local maxN, maxC, maxM, rate = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
if maxN > 0 and n + 1 > maxN then return {'sandboxes', tostring(n), tostring(maxN), 1} end
if maxC > 0 and mcpu + askC > maxC then return {'vcpus', tostring(mcpu / 1000), tostring(maxC / 1000), 1} end
if maxM > 0 and mem + askM > maxM then return {'memory_mib', tostring(mem), tostring(maxM), 1} end
if rate > 0 then
  local b = redis.call('HMGET', KEYS[3], 'tokens', 'at')
  local tokens = tonumber(b[1]) or rate
  local at = tonumber(b[2]) or now
  tokens = math.min(rate, tokens + math.max(0, now - at) / 1000 * rate)
  if tokens < 1 then
    redis.call('HSET', KEYS[3], 'tokens', tostring(tokens), 'at', tostring(now))
    return {'creates_per_sec', tostring(rate), tostring(rate), math.max(1, math.ceil((1 - tokens) / rate))}
  end
  redis.call('HSET', KEYS[3], 'tokens', tostring(tokens - 1), 'at', tostring(now))
  redis.call('PEXPIRE', KEYS[3], 60000)
end
redis.call('HSET', KEYS[2], id, askC .. ' ' .. askM .. ' ' .. (now + tonumber(ARGV[9])))
redis.call('PEXPIRE', KEYS[2], ARGV[9])
return {}`;

// Recounts every owner's usage from the routes (KEYS: usage, routes; ARGV: the claims' prefix),
// in one step: after the routes were rebuilt, and at start (routes written by a version that
// did not count).
const REBUILD_USAGE = `${HOLD_LUA}
redis.call('DEL', KEYS[1])
local all = redis.call('HGETALL', KEYS[2])
for i = 1, #all, 2 do hold(all[i + 1], 1, KEYS[1], ARGV[1], all[i]) end
return 1`;

type Run = <T>(op: (r: Redis & Record<string, (...a: unknown[]) => Promise<unknown>>) => Promise<T>, idempotent?: boolean) => Promise<T>;

export class RedisQuota {
  constructor(
    private readonly run: Run,
    private readonly k: (...parts: string[]) => string,
  ) {}

  static define(redis: Redis): void {
    redis.defineCommand('cubeClaimQuota', { numberOfKeys: 4, lua: CLAIM_QUOTA });
    redis.defineCommand('cubeRebuildUsage', { numberOfKeys: 2, lua: REBUILD_USAGE });
  }

  /** The keys and arguments the route scripts pass to hold(): the usage hash, the claims' prefix. */
  get usageKey(): string {
    return this.k('shared', 'quota-usage');
  }
  get claimsPrefix(): string {
    return this.k('shared', 'quota-claims', '');
  }

  async claim(c: QuotaClaim): Promise<QuotaRefusal | undefined> {
    const l = c.limits;
    const out = (await this.run(
      (r) =>
        r.cubeClaimQuota!(
          this.usageKey,
          this.claimsPrefix + c.owner,
          this.k('shared', 'quota-rate', c.owner),
          this.k('shared', 'sandboxes'),
          c.owner,
          c.sandboxID,
          milliCpus(c.cpus),
          c.memoryMiB,
          l.sandboxes,
          milliCpus(l.vcpus),
          l.memory_mib,
          l.creates_per_sec,
          c.ttlMs,
        ),
      false,
    )) as [QuotaName, string, string, number] | [];
    if (out.length === 0) return undefined;
    return { quota: out[0], used: Number(out[1]), limit: Number(out[2]), retryAfter: Number(out[3]) };
  }

  async release(owner: string, sandboxID: string): Promise<void> {
    await this.run((r) => r.hdel(this.claimsPrefix + owner, sandboxID));
  }

  async usage(owners: string[]): Promise<Map<string, KeyUsage>> {
    const now = Date.now();
    const out = new Map<string, KeyUsage>();
    await Promise.all(
      owners.map(async (o) => {
        const [counts, claims] = await Promise.all([
          this.run((r) => r.hmget(this.usageKey, `${o}:n`, `${o}:mcpu`, `${o}:mem`)),
          this.run((r) => r.hgetall(this.claimsPrefix + o)),
        ]);
        let [n, mcpu, mem] = counts.map((v) => Number(v ?? 0)) as [number, number, number];
        for (const v of Object.values(claims)) {
          const [c, m, d] = v.split(' ').map(Number) as [number, number, number];
          if (d <= now) continue;
          n++;
          mcpu += c;
          mem += m;
        }
        out.set(o, { sandboxes: n, vcpus: mcpu / 1000, memoryMiB: mem });
      }),
    );
    return out;
  }

  async rebuild(): Promise<void> {
    await this.run((r) => r.cubeRebuildUsage!(this.usageKey, this.k('shared', 'sandboxes'), this.claimsPrefix));
  }
}
