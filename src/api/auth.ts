// API keys: from --api-key, else CUBE_API_KEY, else one generated on first start and kept in
// <data-dir>/api-key (mode 0600). Callers are identified by a key id (a hash prefix), so
// audit records and logs never hold the key itself.
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import { chmodSync, existsSync, readFileSync, writeFileSync } from 'node:fs';
import type { IncomingMessage } from 'node:http';
import { join } from 'node:path';
import type { Caller } from './context.js';

export interface ApiKeySource {
  key: string;
  /** 'flag', 'env', 'file' (read back) or 'generated'. */
  from: 'flag' | 'env' | 'file' | 'generated';
  path?: string;
}

export function resolveApiKey(opts: { flag?: string; env?: string; dataDir: string }): ApiKeySource {
  if (opts.flag) return { key: opts.flag, from: 'flag' };
  if (opts.env) return { key: opts.env, from: 'env' };
  const path = join(opts.dataDir, 'api-key');
  if (existsSync(path)) {
    const key = readFileSync(path, 'utf8').trim();
    if (key) return { key, from: 'file', path };
  }
  const key = `e2b_${randomBytes(20).toString('hex')}`;
  writeFileSync(path, `${key}\n`, { mode: 0o600, flag: 'w' });
  chmodSync(path, 0o600);
  return { key, from: 'generated', path };
}

export function keyID(key: string): string {
  return `key-${createHash('sha256').update(key).digest('hex').slice(0, 8)}`;
}

/** The key a request presents: `X-API-Key` (any case) or `Authorization: Bearer`. */
export function presentedKey(req: IncomingMessage): string | undefined {
  const x = req.headers['x-api-key'];
  if (typeof x === 'string' && x) return x;
  const auth = req.headers.authorization;
  const m = auth ? /^Bearer\s+(\S+)$/i.exec(auth) : null;
  return m?.[1];
}

export class ApiKeys {
  private readonly keys: { digest: Buffer; id: string }[];

  constructor(keys: string[]) {
    this.keys = keys.map((k) => ({ digest: digest(k), id: keyID(k) }));
  }

  /** The caller, or undefined when the key is missing or wrong (constant-time compare). */
  authenticate(req: IncomingMessage): Caller | undefined {
    const k = presentedKey(req);
    if (!k) return undefined;
    const d = digest(k);
    const hit = this.keys.find((x) => timingSafeEqual(x.digest, d));
    return hit ? { keyID: hit.id } : undefined;
  }
}

const digest = (k: string) => createHash('sha256').update(k).digest();
