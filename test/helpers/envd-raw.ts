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
    headers: {
      'content-type': 'application/connect+json',
      'connect-protocol-version': '1',
      'e2b-sandbox-id': s.sandboxID,
      'x-access-token': s.envdAccessToken,
      authorization: `Basic ${Buffer.from('user:').toString('base64')}`,
    },
  });
  req.on('response', (res) => res.pause()); // never read
  req.on('error', () => undefined);
  req.end(Buffer.concat([head, msg]));
  return () => req.destroy();
}

/** What a Connect server stream carried: its messages, and the end-stream message's error if any. */
export interface ReadStream {
  messages: Record<string, unknown>[];
  error?: { code: string; message: string };
}

/**
 * envd's Process/Start over raw HTTP with `Connect-Timeout-Ms` and no deadline of the client's
 * own (what the Python SDK sends: it reads until the server ends the stream), read to its end.
 */
export function startAndRead(baseUrl: string, s: { sandboxID: string; envdAccessToken: string }, cmd: string, timeoutMs: number): Promise<ReadStream> {
  const msg = Buffer.from(JSON.stringify({ process: { cmd: '/bin/sh', args: ['-c', cmd] } }));
  const head = Buffer.alloc(5);
  head.writeUInt32BE(msg.length, 1);
  return new Promise((resolve, reject) => {
    const req = request(new URL('/process.Process/Start', baseUrl), {
      method: 'POST',
      headers: {
        'content-type': 'application/connect+json',
        'connect-protocol-version': '1',
        'connect-timeout-ms': String(timeoutMs),
        'e2b-sandbox-id': s.sandboxID,
        'x-access-token': s.envdAccessToken,
        authorization: `Basic ${Buffer.from('user:').toString('base64')}`,
      },
    });
    req.on('response', (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('error', reject);
      res.on('end', () => {
        const all = Buffer.concat(chunks);
        const out: ReadStream = { messages: [] };
        for (let at = 0; at + 5 <= all.length;) {
          const flags = all[at]!;
          const len = all.readUInt32BE(at + 1);
          const body = JSON.parse(all.subarray(at + 5, at + 5 + len).toString()) as Record<string, unknown>;
          at += 5 + len;
          if (flags & 0x02) {
            if (body.error) out.error = body.error as ReadStream['error'];
          } else out.messages.push(body);
        }
        resolve(out);
      });
    });
    req.on('error', reject);
    req.end(Buffer.concat([head, msg]));
  });
}
