// envd in a real sandbox through a Connect client that speaks binary protobuf with gzip, as the
// older Python SDKs do (the JS SDK's JSON codec is covered by sdk.test.ts and pty.test.ts).
import { Code, ConnectError, createClient, type Interceptor } from '@connectrpc/connect';
import { compressionGzip, createConnectTransport } from '@connectrpc/connect-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FileType, Filesystem } from '../../src/api/envd/gen/filesystem/filesystem_pb.js';
import { Process } from '../../src/api/envd/gen/process/process_pb.js';
import { call, startDaemon, type TestDaemon } from '../helpers/daemon.js';

let d: TestDaemon;
let sandboxID: string;
let headers: Record<string, string>;

beforeAll(async () => {
  d = await startDaemon();
  const r = await call(d, 'POST', '/sandboxes', { templateID: 'base', timeout: 300 });
  expect(r.status).toBe(201);
  sandboxID = r.json.sandboxID;
  headers = { 'e2b-sandbox-id': sandboxID, 'e2b-sandbox-port': '49983', 'x-access-token': r.json.envdAccessToken };
});

afterAll(async () => {
  try {
    if (sandboxID) await call(d, 'DELETE', `/sandboxes/${sandboxID}`);
  } finally {
    await d?.stop();
  }
});

/** Routed to the sandbox's envd by the E2B headers on every call. */
const routed: Interceptor = (next) => (req) => {
  for (const [k, v] of Object.entries(headers)) req.header.set(k, v);
  return next(req);
};
const transport = () =>
  createConnectTransport({
    baseUrl: d.url,
    httpVersion: '1.1',
    useBinaryFormat: true,
    sendCompression: compressionGzip,
    acceptCompression: [compressionGzip],
    interceptors: [routed],
  });

describe('binary protobuf + gzip', () => {
  it('runs a command and streams its output (large enough to be compressed)', async () => {
    const proc = createClient(Process, transport());
    let out = '';
    let exit: number | undefined;
    for await (const { event } of proc.start({
      process: { cmd: '/bin/bash', args: ['-c', 'head -c 6000 /dev/zero | tr "\\0" x; echo; echo err >&2; exit 3'], envs: {} },
    })) {
      const e = event?.event;
      if (e?.case === 'data' && e.value.output.case === 'stdout') out += Buffer.from(e.value.output.value).toString();
      if (e?.case === 'end') exit = e.value.exitCode;
    }
    expect(out).toBe(`${'x'.repeat(6000)}\n`);
    expect(exit).toBe(3);
  });

  it('answers the filesystem service and its errors with Connect codes', async () => {
    const fs = createClient(Filesystem, transport());
    const made = await fs.makeDir({ path: 'codec-dir' });
    expect(made.entry).toMatchObject({ name: 'codec-dir', type: FileType.DIRECTORY, path: '/home/user/codec-dir', owner: 'user' });
    const listed = await fs.listDir({ path: '~', depth: 1 });
    expect(listed.entries.map((e) => e.name)).toContain('codec-dir');
    const missing = await fs.stat({ path: '/no/such/file' }).catch((e: unknown) => ConnectError.from(e));
    expect((missing as ConnectError).code).toBe(Code.NotFound);
  });

  it('serves the polling watcher (CreateWatcher, GetWatcherEvents, RemoveWatcher) as the Python SDK polls it', async () => {
    const fs = createClient(Filesystem, transport());
    const proc = createClient(Process, transport());
    await fs.makeDir({ path: 'polled' });
    const { watcherId } = await fs.createWatcher({ path: 'polled', includeEntry: true });
    for await (const _ of proc.start({ process: { cmd: '/bin/bash', args: ['-c', 'cd ~/polled && echo 1 > f && mv f g'], envs: {} } }));
    const seen: string[] = [];
    for (let i = 0; i < 100 && !seen.includes('g:1'); i++) {
      for (const e of (await fs.getWatcherEvents({ watcherId })).events) seen.push(`${e.name}:${e.type}${e.entry ? `:${e.entry.name}` : ''}`);
      await new Promise((r) => setTimeout(r, 100));
    }
    // f's entry is there only if it was stat'ed before the mv: whether it is depends on timing.
    expect(seen.map((e) => e.replace(/:f$/, ''))).toEqual(['f:1', 'f:2', 'f:4', 'g:1:g']);
    await fs.removeWatcher({ watcherId });
    const gone = await fs.getWatcherEvents({ watcherId }).catch((e: unknown) => ConnectError.from(e));
    expect((gone as ConnectError).code).toBe(Code.NotFound);
  });
});
