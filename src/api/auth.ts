// Who is asking. The key every version before key records had (from --api-key, else
// CUBE_API_KEY, else one generated on first start and kept in <data-dir>/api-key, mode 0600)
// becomes the first admin key (KeyBook.bootstrap); the keys themselves are records in the state
// store (control/keys.ts). Callers are identified by a key id (a hash prefix), so audit records and
// logs never hold the key itself.
import { chmodSync, existsSync, readFileSync, writeFileSync } from 'node:fs';
import type { IncomingMessage } from 'node:http';
import { join } from 'node:path';
import { newApiKey } from '../control/keys.js';

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
  const key = newApiKey();
  writeFileSync(path, `${key}\n`, { mode: 0o600, flag: 'w' });
  chmodSync(path, 0o600);
  return { key, from: 'generated', path };
}

/** The key a request presents: `X-API-Key` (any case) or `Authorization: Bearer`. */
export function presentedKey(req: IncomingMessage): string | undefined {
  const x = req.headers['x-api-key'];
  if (typeof x === 'string' && x) return x;
  const auth = req.headers.authorization;
  const m = auth ? /^Bearer\s+(\S+)$/i.exec(auth) : null;
  return m?.[1];
}

/** Paths only an admin key may use: the admin API (nodes, config, keys, every sandbox) and the node's metrics. */
export function needsAdmin(path: string): boolean {
  return path.startsWith('/admin/') || path === '/metrics';
}
