import { mkdtempSync, rmSync, statSync, readFileSync } from 'node:fs';
import type { IncomingMessage } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { needsAdmin, presentedKey, resolveApiKey } from '../../src/api/auth.js';
import { ConcurrencyLimiter, isCreateLike, RateLimiter } from '../../src/api/rate-limit.js';

const req = (headers: Record<string, string>) => ({ headers }) as unknown as IncomingMessage;

describe('API keys', () => {
  it('prefers the flag, then the env, then the key file, and generates e2b_<40 hex> mode 0600 on first start', () => {
    const dir = mkdtempSync(join(tmpdir(), 'cubed-test-auth-'));
    try {
      expect(resolveApiKey({ flag: 'f', env: 'e', dataDir: dir })).toEqual({ key: 'f', from: 'flag' });
      expect(resolveApiKey({ env: 'e', dataDir: dir })).toEqual({ key: 'e', from: 'env' });
      const g = resolveApiKey({ dataDir: dir });
      expect(g.from).toBe('generated');
      expect(g.key).toMatch(/^e2b_[0-9a-f]{40}$/);
      expect(statSync(g.path!).mode & 0o777).toBe(0o600);
      expect(readFileSync(g.path!, 'utf8').trim()).toBe(g.key);
      expect(resolveApiKey({ dataDir: dir })).toEqual({ key: g.key, from: 'file', path: g.path });
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it.each([
    [{ 'x-api-key': 'k' }, 'k'],
    [{ authorization: 'Bearer k' }, 'k'],
    [{ authorization: 'bearer k' }, 'k'],
    [{ authorization: 'Basic k' }, undefined],
    [{}, undefined],
  ])('%o presents %s', (headers, want) => expect(presentedKey(req(headers))).toBe(want));

  it.each([
    ['/admin/v1/config', true],
    ['/admin/v1/keys', true],
    ['/metrics', true],
    ['/sandboxes', false],
    ['/v2/templates', false],
    ['/adminish', false],
  ])('%s takes an admin key: %s', (path, want) => expect(needsAdmin(path)).toBe(want));
});

describe('rate limiter', () => {
  it('admits `rate` per second per key with whole-second Retry-After, and follows a new rate', () => {
    let rate = 3;
    const rl = new RateLimiter(() => rate);
    const t = 1_000_000;
    expect([rl.take('a', t), rl.take('a', t), rl.take('a', t)]).toEqual([0, 0, 0]);
    expect(rl.take('a', t)).toBe(1);
    expect(rl.take('b', t)).toBe(0);
    expect(rl.take('a', t + 400)).toBe(0);
    rate = 0.5;
    expect(rl.take('a', t + 400)).toBe(2);
  });
});

describe('rate limiter: unlimited, peeking, bounded', () => {
  it('rate 0 admits everything', () => {
    const rl = new RateLimiter(() => 0);
    for (let i = 0; i < 1000; i++) expect(rl.take('a', 1)).toBe(0);
  });
  it('wait() tells without taking', () => {
    const rl = new RateLimiter(() => 2);
    expect(rl.wait('a', 0)).toBe(0);
    expect([rl.take('a', 0), rl.take('a', 0)]).toEqual([0, 0]);
    expect(rl.wait('a', 0)).toBe(1);
    expect(rl.wait('a', 0)).toBe(1);
    expect(rl.wait('a', 600)).toBe(0);
  });
  it('keeps at most maxKeys buckets under a flood from many addresses, and still limits a flooding one', () => {
    const rl = new RateLimiter(() => 1, 100);
    for (let i = 0; i < 10_000; i++) rl.take(`10.0.${i >> 8}.${i & 255}`, 0);
    expect((rl as unknown as { buckets: Map<string, unknown> }).buckets.size).toBeLessThanOrEqual(100);
    expect([rl.take('x', 0), rl.take('x', 0)]).toEqual([0, 1]);
  });
});

describe('concurrency limiter', () => {
  it('admits `limit` at once per key; a release frees one slot, once', () => {
    let limit = 2;
    const cl = new ConcurrencyLimiter(() => limit);
    const r1 = cl.acquire('a')!;
    const r2 = cl.acquire('a')!;
    expect(cl.acquire('a')).toBeUndefined();
    expect(cl.acquire('b')).toBeDefined();
    r1();
    r1();
    expect(cl.inFlight('a')).toBe(1);
    expect(cl.acquire('a')).toBeDefined();
    expect(cl.acquire('a')).toBeUndefined();
    limit = 3;
    expect(cl.acquire('a')).toBeDefined();
    r2();
    expect(cl.inFlight('a')).toBe(2);
  });
  it.each([
    ['POST', '/sandboxes', true],
    ['POST', '/v2/sandboxes', true],
    ['POST', '/sandboxes/abc/resume', true],
    ['POST', '/sandboxes/abc/connect', true],
    ['POST', '/v2/sandboxes/abc/connect', true],
    ['POST', '/admin/v1/sandboxes', true],
    ['POST', '/admin/v1/sandboxes/abc/resume', true],
    ['GET', '/sandboxes', false],
    ['DELETE', '/sandboxes/abc', false],
    ['POST', '/sandboxes/abc/pause', false],
    ['POST', '/sandboxes/abc/timeout', false],
    ['POST', '/admin/v1/sandboxes/abc/exec', false],
  ])('%s %s takes a create slot: %s', (method, path, want) => expect(isCreateLike(method, path)).toBe(want));
});
