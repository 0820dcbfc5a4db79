// envd calls over raw HTTP, for what the SDKs would not do on purpose.
import { request } from 'node:http';

/**
 * envd's Process/Start over raw HTTP (the Connect streaming protocol, JSON) against the daemon at
 * `baseUrl`, whose answer is never read: what the Python SDK's `background=True` handle that nobody
 * waits on does. Returns what ends the request.
 */
export function startUnread(baseUrl: string, s: { sandboxID: string; envdAccessToken: string }, cmd: string): () => void {
  const msg = Buffer.from(JSON.stringify({ process: { cmd: '/bin/sh', args: ['-c', cmd] } }));
  const head = Buffer.alloc(5);
  head.writeUInt32BE(msg.length, 1);
  const req = request(new URL('/process.Process/Start', baseUrl), {
    method: 'POST',
    headers: { 'content-type': 'application/connect+json', 'connect-protocol-version': '1', 'e2b-sandbox-id': s.sandboxID, 'x-access-token': s.envdAccessToken, authorization: `Basic ${Buffer.from('user:').toString('base64')}` },
  });
  req.on('response', (res) => res.pause()); // never read
  req.on('error', () => undefined);
  req.end(Buffer.concat([head, msg]));
  return () => req.destroy();
}
