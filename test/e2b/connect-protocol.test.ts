import { create, fromBinary, toBinary, toJson } from '@bufbuild/protobuf';
import { describe, expect, it } from 'vitest';
import { CubeError } from '../../src/errors.js';
import { Code, keepaliveIntervalMs, toConnectError } from '../../src/api/envd/connect.js';
import { EntryInfoSchema } from '../../src/api/envd/gen/filesystem/filesystem_pb.js';
import { ProcessEventSchema, ProcessSelectorSchema, Signal, StartRequestSchema } from '../../src/api/envd/gen/process/process_pb.js';
import {
  entryInfo,
  inputBytes,
  permissionString,
  processEvent,
  resolvePath,
  selector,
  signalName,
  startOptions,
  userFromAuthorization,
} from '../../src/api/envd/messages.js';
import { parseSandboxHost, targetOf } from '../../src/api/envd/target.js';

describe('Connect codes', () => {
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
    ['NOT_FOUND', Code.NotFound],
    ['BAD_REQUEST', Code.InvalidArgument],
    ['UNAUTHORIZED', Code.Unauthenticated],
    ['RATE_LIMITED', Code.ResourceExhausted],
    ['SANDBOX_BUSY', Code.Unavailable],
    ['EXEC_FAILED', Code.Internal],
  ] as const)('CubeError %s → Connect code %d', (kind, code) => {
    const e = toConnectError(new CubeError(kind, 'x'));
    expect(e.code).toBe(code);
    expect(e.rawMessage).toMatch(/^1304\d\d |^1305\d\d /);
  });
});

describe('envd messages', () => {
  /** What the SDK's JSON codec puts on the wire for a ProcessEvent. */
  const wire = (ev: Parameters<typeof processEvent>[0]) => toJson(ProcessEventSchema, create(ProcessEventSchema, processEvent(ev)));

  it('maps process events to what the SDK reads', () => {
    expect(wire({ type: 'start', pid: 101 })).toEqual({ start: { pid: 101 } });
    expect(wire({ type: 'stdout', data: Buffer.from('hi\n') })).toEqual({ data: { stdout: 'aGkK' } });
    expect(wire({ type: 'stderr', data: Buffer.from('e') })).toEqual({ data: { stderr: 'ZQ==' } });
    expect(wire({ type: 'end', exitCode: 0, oomKilled: false, timedOut: false })).toEqual({ end: { exited: true, status: 'exit status 0' } });
    expect(wire({ type: 'end', exitCode: 3, oomKilled: false, timedOut: false })).toEqual({
      end: { exitCode: 3, exited: true, status: 'exit status 3', error: 'exit status 3' },
    });
    expect(wire({ type: 'end', exitCode: 137, signal: 'SIGKILL', oomKilled: true, timedOut: false })).toEqual({
      end: { exitCode: -1, status: 'signal: killed', error: 'signal: killed: killed by the out-of-memory killer' },
    });
  });

  it('round-trips a process event through the binary codec (sint32 exit codes)', () => {
    const msg = create(ProcessEventSchema, processEvent({ type: 'end', exitCode: 137, signal: 'SIGKILL', oomKilled: false, timedOut: true }));
    const back = fromBinary(ProcessEventSchema, toBinary(ProcessEventSchema, msg));
    expect(back.event).toMatchObject({ case: 'end', value: { exitCode: -1, error: 'signal: killed: timed out (Connect-Timeout-Ms)' } });
  });

  const start = (init: Parameters<typeof create<typeof StartRequestSchema>>[1]) => startOptions(create(StartRequestSchema, init));

  it('takes what commands.run sends', () => {
    expect(start({ process: { cmd: '/bin/bash', args: ['-l', '-c', 'echo $X'], envs: { X: 'y' }, cwd: 'sub' }, stdin: false })).toEqual({
      argv: ['/bin/bash', '-l', '-c', 'echo $X'],
      env: { X: 'y' },
      cwd: 'sub',
      stdin: false,
    });
    expect(() => start({ process: { args: [] } })).toThrow(/process.cmd is required/);
    expect(start({ process: { cmd: 'x' }, pty: { size: { cols: 80, rows: 24 } } }).pty).toEqual({ cols: 80, rows: 24 });
    expect(start({ process: { cmd: 'x' }, pty: { size: { cols: 100 } } }).pty).toEqual({ cols: 100, rows: 24 });
    expect(start({ process: { cmd: 'x' }, pty: {} }).pty).toEqual({ cols: 80, rows: 24 });
    expect(() => start({ process: { cmd: 'x' }, pty: { size: { cols: 1e6, rows: 2 } } })).toThrow(/cols and rows from 0 to 65535/);
  });

  it('takes process input for a pipe or a terminal', () => {
    expect(inputBytes({ $typeName: 'process.ProcessInput', input: { case: 'stdin', value: Buffer.from('a') } }).toString()).toBe('a');
    expect(inputBytes({ $typeName: 'process.ProcessInput', input: { case: 'pty', value: Buffer.from('b') } }).toString()).toBe('b');
    expect(() => inputBytes(undefined)).toThrow(/input.stdin or input.pty/);
  });

  it.each([
    [Signal.SIGKILL, 'SIGKILL'],
    [Signal.SIGTERM, 'SIGTERM'],
  ])('signal %j → %s', (v, s) => {
    expect(signalName(v)).toBe(s);
  });

  it('refuses other signals and empty selectors', () => {
    expect(() => signalName(Signal.UNSPECIFIED)).toThrow(/unsupported signal UNSPECIFIED/);
    expect(selector(create(ProcessSelectorSchema, { selector: { case: 'pid', value: 5 } }))).toEqual({ pid: 5 });
    expect(selector(create(ProcessSelectorSchema, { selector: { case: 'tag', value: 't' } }))).toEqual({ tag: 't' });
    expect(() => selector(create(ProcessSelectorSchema, {}))).toThrow(/pid \(> 0\) or a tag/);
    expect(() => selector(undefined)).toThrow(/pid \(> 0\) or a tag/);
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
    expect(() => userFromAuthorization(`Basic ${Buffer.from('bob:').toString('base64')}`)).toThrow(expect.objectContaining({ code: Code.Unauthenticated }));
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
    const e = entryInfo({
      name: 'a.txt',
      path: '/home/user/a.txt',
      type: 'file',
      size: 10,
      mode: 0o100644,
      uid: 1000,
      gid: 1000,
      mtime: new Date('2026-01-02T03:04:05Z'),
    });
    expect(toJson(EntryInfoSchema, create(EntryInfoSchema, e))).toEqual({
      name: 'a.txt',
      type: 'FILE_TYPE_FILE',
      path: '/home/user/a.txt',
      size: '10',
      mode: 0o644,
      permissions: '-rw-r--r--',
      owner: 'user',
      group: 'user',
      modifiedTime: '2026-01-02T03:04:05Z',
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
