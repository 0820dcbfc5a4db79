// Pre-signed /files URLs (the SDK's uploadUrl()/downloadUrl()): envd's scheme, where the
// sandbox's access token signs the path, the operation, the user and an optional expiry:
//   "v1_" + base64(sha256("<path>:<read|write>:<user>:<token>[:<expiration>]")), padding stripped.
// Such a URL carries no sandbox header, so the sandbox is found by the token that verifies it. Pure.
import { createHash, timingSafeEqual } from 'node:crypto';

export interface SignedFileRequest {
  path: string;
  operation: 'read' | 'write';
  /** The user as signed: the query's `username`, or the spellings SDKs sign when they send none. */
  users: string[];
  signature: string;
  /** Unix seconds; absent for URLs that never expire. */
  expiration?: number;
}

export function fileSignature(a: { path: string; operation: 'read' | 'write'; user: string; token: string; expiration?: number }): string {
  const raw = [a.path, a.operation, a.user, a.token, ...(a.expiration !== undefined ? [String(a.expiration)] : [])].join(':');
  return 'v1_' + createHash('sha256').update(raw).digest('base64').replace(/=+$/, '');
}

/** The signed part of a request to /files, or undefined when it carries no signature. */
export function signedFileRequest(method: string | undefined, url: string): SignedFileRequest | undefined {
  // Every API request is asked (server.ts): parsing each URL was 0.5% of the control's CPU in the
  // 1000-node bench. A URL without "files" cannot have the path /files (dot segments resolved).
  if (!url.includes('files')) return undefined;
  const u = new URL(url, 'http://x');
  const signature = u.searchParams.get('signature');
  if (u.pathname !== '/files' || !signature) return undefined;
  const user = u.searchParams.get('username');
  const exp = u.searchParams.get('signature_expiration');
  return {
    path: u.searchParams.get('path') ?? '',
    operation: method === 'POST' ? 'write' : 'read',
    // JS SDKs sign `${undefined}` and Python ones `None` when no user is given; envd signs ''.
    users: user !== null ? [user] : ['', 'undefined', 'None'],
    // A '+' of the base64 left unescaped in a hand-built URL arrives as a space.
    signature: signature.replaceAll(' ', '+'),
    ...(exp !== null ? { expiration: /^\d+$/.test(exp) ? Number(exp) : Number.NaN } : {}),
  };
}

export type SignatureCheck = 'ok' | 'mismatch' | 'expired';

export function checkFileSignature(s: SignedFileRequest, token: string, nowSec: number): SignatureCheck {
  const given = Buffer.from(s.signature);
  const match = s.users.some((user) => {
    const want = Buffer.from(
      fileSignature({ path: s.path, operation: s.operation, user, token, ...(s.expiration !== undefined ? { expiration: s.expiration } : {}) }),
    );
    return want.length === given.length && timingSafeEqual(want, given);
  });
  if (!match) return 'mismatch';
  return s.expiration !== undefined && !(s.expiration >= nowSec) ? 'expired' : 'ok';
}
