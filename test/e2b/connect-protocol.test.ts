import { describe, expect, it } from 'vitest';
import { CubeError } from '../../src/errors.js';
import {
  ConnectError,
  FLAG_END_STREAM,
  FLAG_MESSAGE,
  decodeEnvelopes,
  decodeStreamRequest,
  encodeEndStream,
  encodeEnvelope,
  encodeMessage,
  httpStatusOf,
  keepaliveIntervalMs,
  parseTimeoutMs,
  toConnectError,
} from '../../src/api/envd/connect.js';
import {
  entryInfo,
  parseInput,
  parseSelector,
  parseSignal,
  parseStartRequest,
  permissionString,
  processEventJson,
  resolvePath,
  userFromAuthorization,
} from '../../src/api/envd/messages.js';
import { parseSandboxHost, targetOf } from '../../src/api/envd/target.js';
import { diffListings, listingOf } from '../../src/api/envd/watch.js';

describe('Connect envelopes', () => {
  it('frames a message as flags, big-endian length, JSON', () => {
    const f = encodeMessage({ event: { start: { pid: 7 } } });
    const json = '{"event":{"start":{"pid":7}}}';
    expect(f[0]).toBe(FLAG_MESSAGE);
    expect(f.readUInt32BE(1)).toBe(json.length);
    expect(f.subarray(5).toString()).toBe(json);
  });

  it('ends a stream with flag 0x02 and {} or {error}', () => {
    const ok = encodeEndStream();
    expect(ok[0]).toBe(FLAG_END_STREAM);
    expect(ok.subarray(5).toString()).toBe('{}');
    const bad = encodeEndStream(new ConnectError('not_found', 'no such pid'));
    expect(JSON.parse(bad.subarray(5).toString())).toEqual({ error: { code: 'not_found', message: 'no such pid' } });
  });

  it('splits a byte stream into envelopes and keeps an incomplete tail', () => {
    const a = encodeMessage({ a: 1 });
    const b = encodeEnvelope(FLAG_END_STREAM, {});
    const all = Buffer.concat([a, b]);
    for (let cut = 0; cut <= all.length; cut++) {
      const first = decodeEnvelopes(all.subarray(0, cut));
      const second = decodeEnvelopes(Buffer.concat([first.rest, all.subarray(cut)]));
      const got = [...first.envelopes, ...second.envelopes].map((e) => [e.flags, e.data.toString()]);
      expect(got).toEqual([
        [0, '{"a":1}'],
        [2, '{}'],
      ]);
      expect(second.rest.length).toBe(0);
    }
  });

  it('takes exactly one request envelope, uncompressed', () => {
    expect(decodeStreamRequest(encodeMessage({ path: '/x' }))).toEqual({ path: '/x' });
    expect(() => decodeStreamRequest(Buffer.concat([encodeMessage({}), encodeMessage({})]))).toThrow(/one request envelope/);
    expect(() => decodeStreamRequest(encodeEnvelope(1, {}))).toThrow(/compressed/);
    expect(() => decodeStreamRequest(encodeMessage({}).subarray(0, 4))).toThrow(/inside an envelope/);
  });

  it.each([
    [undefined, undefined],
    ['', undefined],
    ['0', undefined],
    ['1500', 1500],
    [['60000'], 60000],
  ])('Connect-Timeout-Ms %j → %j', (h, ms) => {
    expect(parseTimeoutMs(h)).toBe(ms);
  });

  it('rejects a malformed Connect-Timeout-Ms', () => {
    expect(() => parseTimeoutMs('1.5')).toThrow(ConnectError);
    expect(() => parseTimeoutMs('12345678901')).toThrow(/Connect-Timeout-Ms/);
  });

  it.each([
    [undefined, 90_000],
    ['50', 50_000],
    ['1000', 90_000],
    ['0', 90_000],
    ['0.2', 1000],
  ])('keepalive interval %j → %d ms', (h, ms) => {
    expect(keepaliveIntervalMs(h)).toBe(ms);
  });

  it.each([
    ['NOT_FOUND', 'not_found', 404],
    ['BAD_REQUEST', 'invalid_argument', 400],
    ['UNAUTHORIZED', 'unauthenticated', 401],
    ['RATE_LIMITED', 'resource_exhausted', 429],
    ['SANDBOX_BUSY', 'unavailable', 503],
    ['EXEC_FAILED', 'internal', 500],
  ] as const)('CubeError %s → %s (HTTP %d)', (kind, code, status) => {
    const e = toConnectError(new CubeError(kind, 'x'));
    expect(e.code).toBe(code);
    expect(httpStatusOf(e.code)).toBe(status);
    expect(e.message).toMatch(/^1304\d\d|^1305\d\d/);
  });
});

describe('envd messages', () => {
  it('maps process events to protobuf JSON', () => {
    expect(processEventJson({ type: 'start', pid: 101 })).toEqual({ event: { start: { pid: 101 } } });
    expect(processEventJson({ type: 'stdout', data: Buffer.from('hi\n') })).toEqual({ event: { data: { stdout: 'aGkK' } } });
    expect(processEventJson({ type: 'stderr', data: Buffer.from('e') })).toEqual({ event: { data: { stderr: 'ZQ==' } } });
    expect(processEventJson({ type: 'end', exitCode: 0, oomKilled: false, timedOut: false })).toEqual({ event: { end: { exitCode: 0, exited: true, status: 'exit status 0' } } });
    expect(processEventJson({ type: 'end', exitCode: 3, oomKilled: false, timedOut: false })).toEqual({
      event: { end: { exitCode: 3, exited: true, status: 'exit status 3', error: 'exit status 3' } },
    });
    expect(processEventJson({ type: 'end', exitCode: 137, signal: 'SIGKILL', oomKilled: true, timedOut: false })).toEqual({
      event: { end: { exitCode: -1, exited: false, status: 'signal: killed', error: 'signal: killed: killed by the out-of-memory killer' } },
    });
  });

  it('parses what commands.run sends', () => {
    const r = parseStartRequest({ process: { cmd: '/bin/bash', args: ['-l', '-c', 'echo $X'], envs: { X: 'y' }, cwd: 'sub' }, stdin: false });
    expect(r).toEqual({ argv: ['/bin/bash', '-l', '-c', 'echo $X'], env: { X: 'y' }, cwd: 'sub', stdin: false });
    expect(() => parseStartRequest({ process: { args: [] } })).toThrow(/cmd is required/);
    expect(() => parseStartRequest({ process: { cmd: 'x', envs: { A: 1 } } })).toThrow(/envs.A must be a string/);
    expect(parseStartRequest({ process: { cmd: 'x' }, pty: { size: { cols: 80, rows: 24 } } }).pty).toEqual({ cols: 80, rows: 24 });
    expect(parseStartRequest({ process: { cmd: 'x' }, pty: { size: { cols: 100 } } }).pty).toEqual({ cols: 100, rows: 24 });
    expect(parseStartRequest({ process: { cmd: 'x' }, pty: {} }).pty).toEqual({ cols: 80, rows: 24 });
    expect(() => parseStartRequest({ process: { cmd: 'x' }, pty: { size: { cols: 1e6, rows: 2 } } })).toThrow(/cols and rows from 0 to 65535/);
    expect(() => parseStartRequest({ process: { cmd: 'x' }, pty: { size: { cols: -1, rows: 2 } } })).toThrow(/cols and rows/);
  });

  it('takes process input for a pipe or a terminal', () => {
    expect(parseInput({ stdin: Buffer.from('a').toString('base64') }).toString()).toBe('a');
    expect(parseInput({ pty: Buffer.from('b').toString('base64') }).toString()).toBe('b');
    expect(() => parseInput({})).toThrow(/input.stdin or input.pty/);
  });

  it.each([
    ['SIGNAL_SIGKILL', 'SIGKILL'],
    [9, 'SIGKILL'],
    ['SIGNAL_SIGTERM', 'SIGTERM'],
    [15, 'SIGTERM'],
  ])('signal %j → %s', (v, s) => {
    expect(parseSignal(v)).toBe(s);
  });

  it('refuses other signals and empty selectors', () => {
    expect(() => parseSignal('SIGNAL_UNSPECIFIED')).toThrow(/unsupported signal/);
    expect(parseSelector({ pid: 5 })).toEqual({ pid: 5 });
    expect(parseSelector({ tag: 't' })).toEqual({ tag: 't' });
    expect(() => parseSelector({})).toThrow(/pid or tag/);
  });

  it.each([
    [undefined, 'user'],
    [`Basic ${Buffer.from('root:').toString('base64')}`, 'root'],
    [`Basic ${Buffer.from('user:').toString('base64')}`, 'user'],
    [`basic ${Buffer.from(':').toString('base64')}`, 'user'],
  ])('Authorization %j runs as %s', (h, user) => {
    expect(userFromAuthorization(h)).toBe(user);
  });

  it('refuses unknown users as unauthenticated', () => {
    expect(() => userFromAuthorization(`Basic ${Buffer.from('bob:').toString('base64')}`)).toThrow(expect.objectContaining({ code: 'unauthenticated' }));
  });

  it.each([
    [undefined, 'user', '/home/user'],
    ['~', 'user', '/home/user'],
    ['~/a/b', 'root', '/root/a/b'],
    ['sub/x', 'user', '/home/user/sub/x'],
    ['/tmp/../etc', 'user', '/etc'],
    ['/abs', 'root', '/abs'],
  ])('path %j as %s → %s', (p, user, want) => {
    expect(resolvePath(p, user)).toBe(want);
  });

  it('renders entry info like envd', () => {
    const e = entryInfo({ name: 'a.txt', path: '/home/user/a.txt', type: 'file', size: 10, mode: 0o100644, uid: 1000, gid: 1000, mtime: new Date('2026-01-02T03:04:05Z') });
    expect(e).toEqual({
      name: 'a.txt',
      type: 'FILE_TYPE_FILE',
      path: '/home/user/a.txt',
      size: '10',
      mode: 0o644,
      permissions: '-rw-r--r--',
      owner: 'user',
      group: 'user',
      modifiedTime: '2026-01-02T03:04:05.000Z',
    });
    expect(permissionString('dir', 0o755)).toBe('drwxr-xr-x');
    expect(entryInfo({ name: 'd', path: '/d', type: 'dir', size: 0, mode: 0o700, uid: 0, gid: 42, mtime: new Date(0) }).group).toBe('42');
  });
});

describe('sandbox traffic targets', () => {
  it.each([
    ['49983-abc123.sbx.local', 'sbx.local', { port: 49983, sandboxID: 'abc123' }],
    ['8000-abc123.SBX.local:3000', 'sbx.local', { port: 8000, sandboxID: 'abc123' }],
    ['8000-abc123.other.local', 'sbx.local', undefined],
    ['abc123.sbx.local', 'sbx.local', undefined],
    ['99999-abc123.sbx.local', 'sbx.local', undefined],
    ['8000-abc123.sbx.local', '', undefined],
  ])('host %s under %j', (host, domain, want) => {
    expect(parseSandboxHost(host, domain)).toEqual(want);
  });

  it('prefers E2b-Sandbox-Id, then Host, then X-Access-Token', () => {
    expect(targetOf({ 'e2b-sandbox-id': 'abc-6532622b', 'x-access-token': 't' }, '')).toEqual({ by: 'id', sandboxID: 'abc', port: 49983, token: 't' });
    expect(targetOf({ 'e2b-sandbox-id': 'abc', 'e2b-sandbox-port': '8000' }, '')).toEqual({ by: 'id', sandboxID: 'abc', port: 8000 });
    expect(targetOf({ host: '8000-abc.d.io', 'x-access-token': 't' }, 'd.io')).toEqual({ by: 'id', sandboxID: 'abc', port: 8000, token: 't' });
    expect(targetOf({ 'x-access-token': 't' }, '')).toEqual({ by: 'token', token: 't', port: 49983 });
    expect(targetOf({ host: '127.0.0.1:3000', 'x-api-key': 'k' }, 'd.io')).toBeUndefined();
    expect(Number.isNaN((targetOf({ 'e2b-sandbox-id': 'abc', 'e2b-sandbox-port': 'x' }, '') as { port: number }).port)).toBe(true);
  });
});

describe('WatchDir by listing diff', () => {
  const st = (path: string, mtime: number, size = 1) => ({ name: path.split('/').pop()!, path, type: 'file' as const, size, mode: 0o644, uid: 0, gid: 0, mtime: new Date(mtime) });
  it('reports creates, writes and removes relative to the watched dir', () => {
    const before = listingOf([st('/w/a', 1), st('/w/b', 1), st('/w/c', 1)]);
    const after = listingOf([st('/w/a', 1), st('/w/b', 2), st('/w/d/e', 1)]);
    expect(diffListings('/w', before, after)).toEqual([
      { name: 'b', type: 'EVENT_TYPE_WRITE' },
      { name: 'c', type: 'EVENT_TYPE_REMOVE' },
      { name: 'd/e', type: 'EVENT_TYPE_CREATE' },
    ]);
    expect(diffListings('/w/', after, after)).toEqual([]);
  });
});
