// The /files URL signature (src/api/envd/signature.ts) against the SDK's own getSignature.
import { getSignature } from 'e2b';
import { describe, expect, it } from 'vitest';
import { checkFileSignature, fileSignature, signedFileRequest } from '../../src/api/envd/signature.js';

const token = 'tok_0123456789abcdef';

describe('/files signatures', () => {
  it.each([
    { path: '/home/user/a.txt', operation: 'read' as const, user: 'user', exp: undefined },
    { path: 'rel/b.txt', operation: 'write' as const, user: 'root', exp: 60 },
    { path: '/x y/ü.txt', operation: 'read' as const, user: undefined, exp: undefined },
  ])('equals the SDK for $path ($operation, user $user, expiry $exp)', async ({ path, operation, user, exp }) => {
    const sdk = await getSignature({ path, operation, user, expirationInSeconds: exp, envdAccessToken: token });
    const q = new URLSearchParams({
      path,
      signature: sdk.signature,
      ...(user ? { username: user } : {}),
      ...(sdk.expiration ? { signature_expiration: String(sdk.expiration) } : {}),
    });
    const signed = signedFileRequest(operation === 'write' ? 'POST' : 'GET', `/files?${q}`)!;
    expect(signed).toMatchObject({ path, operation, signature: sdk.signature });
    expect(checkFileSignature(signed, token, Math.floor(Date.now() / 1000))).toBe('ok');
    expect(checkFileSignature(signed, 'another-token', 0)).toBe('mismatch');
    if (user) expect(fileSignature({ path, operation, user, token, ...(sdk.expiration ? { expiration: sdk.expiration } : {}) })).toBe(sdk.signature);
  });

  it('tells expired from mismatched, and refuses a non-numeric expiry', () => {
    const signature = fileSignature({ path: '/f', operation: 'read', user: '', token, expiration: 1000 });
    const signed = signedFileRequest('GET', `/files?path=/f&signature=${signature}&signature_expiration=1000`)!;
    expect(checkFileSignature(signed, token, 999)).toBe('ok');
    expect(checkFileSignature(signed, token, 1001)).toBe('expired');
    expect(checkFileSignature({ ...signed, operation: 'write' }, token, 999)).toBe('mismatch');
    const junk = signedFileRequest('GET', `/files?path=/f&signature=${signature}&signature_expiration=soon`)!;
    expect(junk.expiration).toBeNaN();
    expect(checkFileSignature(junk, token, 0)).toBe('mismatch');
  });

  it('is only read from /files with a signature', () => {
    expect(signedFileRequest('GET', '/files?path=/f')).toBeUndefined();
    expect(signedFileRequest('GET', '/other?signature=v1_x')).toBeUndefined();
    expect(signedFileRequest('POST', '/files?path=/f&signature=v1_x')).toMatchObject({ operation: 'write', users: ['', 'undefined', 'None'] });
  });
});
