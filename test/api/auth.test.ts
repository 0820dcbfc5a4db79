import { mkdtempSync, rmSync, statSync, readFileSync } from 'node:fs';
import type { IncomingMessage } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ApiKeys, keyID, presentedKey, resolveApiKey } from '../../src/api/auth.js';
import { RateLimiter } from '../../src/api/rate-limit.js';

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

  it('identifies callers by key id, never the key', () => {
    const keys = new ApiKeys(['secret']);
    expect(keys.authenticate(req({ 'x-api-key': 'secret' }))).toEqual({ keyID: keyID('secret') });
    expect(keyID('secret')).not.toContain('secret');
    expect(keys.authenticate(req({ 'x-api-key': 'other' }))).toBeUndefined();
  });
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
