// Smaller E2B gaps, with the real `e2b` SDK unchanged: non-ASCII file names, what getInfo always
// reports, and options cubed cannot honour refused with a 400 that says so.
import { readdirSync } from 'node:fs';
import { Sandbox, SandboxError } from 'e2b';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { contentDisposition } from '../../src/api/envd/files.js';
import { startDaemon, type TestDaemon } from '../helpers/daemon.js';

let d: TestDaemon;
let opts: { apiKey: string; apiUrl: string; sandboxUrl: string };
let sbx: Sandbox;

beforeAll(async () => {
  d = await startDaemon();
  opts = { apiKey: d.apiKey, apiUrl: d.url, sandboxUrl: d.url };
  sbx = await Sandbox.create({ ...opts, timeoutMs: 300_000 });
});

afterAll(async () => {
  try {
    await sbx?.kill();
  } finally {
    await d?.stop();
  }
});

const openFds = () => readdirSync(`/proc/${d.pid}/fd`).length;

describe('file names beyond ASCII', () => {
  it.each([
    ['plain.txt', `inline; filename="plain.txt"; filename*=UTF-8''plain.txt`],
    ['日本語.txt', `inline; filename="___.txt"; filename*=UTF-8''%E6%97%A5%E6%9C%AC%E8%AA%9E.txt`],
    ['a "quoted" \\ name\'s (1).txt', `inline; filename="a _quoted_ _ name's (1).txt"; filename*=UTF-8''a%20%22quoted%22%20%5C%20name%27s%20%281%29.txt`],
  ])('content-disposition of %s', (name, want) => expect(contentDisposition(name)).toBe(want));

  it('reads and downloads CJK and emoji names, and keeps no file handle open per read', async () => {
    const name = '数据-🎉-файл.txt';
    await sbx.files.write(name, 'héllo 世界\n');
    expect(await sbx.files.read(name)).toBe('héllo 世界\n');
    const before = openFds();
    for (let i = 0; i < 30; i++) expect(await sbx.files.read(name)).toBe('héllo 世界\n');
    const r = await fetch(await sbx.downloadUrl(name));
    expect(r.status).toBe(200);
    expect(r.headers.get('content-disposition')).toBe(`inline; filename="__-_-____.txt"; filename*=UTF-8''${encodeURIComponent(name)}`);
    expect(await r.text()).toBe('héllo 世界\n');
    // Keep-alive sockets come and go; 30 leaked handles do not.
    expect(openFds() - before).toBeLessThan(10);
  });
});

describe('getInfo', () => {
  it('reports lifecycle and network even when the create named neither', async () => {
    const info = await sbx.getInfo();
    expect(info.lifecycle).toEqual({ onTimeout: 'kill', autoResume: false });
    expect(info.network).toMatchObject({ allowOut: [], denyOut: [], allowPublicTraffic: true });
  });
});

describe('options cubed cannot honour are refused, not ignored', () => {
  it('volumeMounts', async () => {
    const e = await Sandbox.create({ ...opts, volumeMounts: { '/data': 'vol1' } }).catch((x: unknown) => x);
    expect(e).toBeInstanceOf(SandboxError);
    expect((e as Error).message).toMatch(/^400: .*volumeMounts are not supported/);
  });

  it('pause({ keepMemory: false }) leaves the sandbox running', async () => {
    const e = await sbx.pause({ keepMemory: false }).catch((x: unknown) => x);
    expect(e).toBeInstanceOf(SandboxError);
    expect((e as Error).message).toMatch(/^400: .*pause without memory is not supported/);
    expect((await sbx.getInfo()).state).toBe('running');
  });

  it("connect({ onResume: 'reboot' })", async () => {
    const e = await Sandbox.connect(sbx.sandboxId, { ...opts, onResume: 'reboot' }).catch((x: unknown) => x);
    expect(e).toBeInstanceOf(SandboxError);
    expect((e as Error).message).toMatch(/^400: .*resume without memory is not supported/);
  });
});
