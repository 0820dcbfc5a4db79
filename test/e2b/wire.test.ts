import { describe, expect, it } from 'vitest';
import {
  NewSandboxSchema,
  detailJson,
  e2bState,
  egressOf,
  lifecycleOf,
  pageOf,
  parseBody,
  parseListQuery,
  parseMetadataFilter,
  refuseUnsupported,
  sandboxIDParam,
  sandboxJson,
} from '../../src/api/e2b/wire.js';
import type { SandboxRecord } from '../../src/model/sandbox.js';

/** `startedAt` as ISO 8601 for reading; the record holds epoch ms. */
function rec(id: string, startedAt: string, over: Partial<SandboxRecord> = {}): SandboxRecord {
  return {
    sandboxID: id,
    templateID: 'host',
    nodeID: 'n1',
    state: 'running',
    spec: { cpus: 1, memoryMiB: 512, diskGiB: 1 },
    metadata: {},
    startedAt: Date.parse(startedAt),
    endAt: Date.parse('2030-01-01T00:00:00.000Z'),
    runtime: 'ns',
    accessToken: `tok-${id}`,
    envVars: {},
    ...over,
  };
}

describe('E2B JSON shapes', () => {
  it('create/connect answer', () => {
    const r = rec('abc', '2026-01-01T00:00:00.000Z');
    expect(sandboxJson(r, '')).toEqual({
      sandboxID: 'abc',
      clientID: '6532622b',
      templateID: 'host',
      alias: 'host',
      envdVersion: '0.6.4',
      envdAccessToken: 'tok-abc',
      trafficAccessToken: null,
    });
    expect(sandboxJson(r, 'sbx.local').domain).toBe('sbx.local');
  });

  it('detail carries state, times, sizes, metadata', () => {
    const d = detailJson(rec('abc', '2026-01-01T00:00:00.000Z', { state: 'pausing', metadata: { run: 'x' } }), '');
    expect(d).toMatchObject({
      state: 'paused',
      cpuCount: 1,
      memoryMB: 512,
      diskSizeMB: 1024,
      metadata: { run: 'x' },
      startedAt: '2026-01-01T00:00:00.000Z',
      endAt: '2030-01-01T00:00:00.000Z',
    });
  });

  it.each([
    ['running', 'running'],
    ['creating', 'running'],
    ['resuming', 'running'],
    ['pausing', 'paused'],
    ['paused', 'paused'],
  ] as const)('state %s is %s', (s, e) => {
    expect(e2bState(s)).toBe(e);
  });

  it('accepts legacy <id>-<clientID> ids', () => {
    expect(sandboxIDParam('abc-6532622b')).toBe('abc');
    expect(() => sandboxIDParam('')).toThrow(/required/);
  });
});

describe('create body', () => {
  it('takes what the SDK sends and ignores unknown fields', () => {
    const b = parseBody(NewSandboxSchema, { templateID: 'base', metadata: { run: 'x1' }, envVars: { FOO: 'bar' }, timeout: 60, secure: true, mcp: null }, 'b');
    expect(b).toMatchObject({ templateID: 'base', timeout: 60, envVars: { FOO: 'bar' } });
  });

  it('names the bad field', () => {
    expect(() => parseBody(NewSandboxSchema, { timeout: 'soon' }, 'sandbox create body')).toThrow(/invalid sandbox create body: timeout:/);
    expect(() => parseBody(NewSandboxSchema, { envVars: { A: 1 } }, 'b')).toThrow(/envVars\.A/);
  });

  it('refuses features it does not have instead of ignoring them', () => {
    expect(() => refuseUnsupported({ autoPause: true, autoPauseMemory: false })).toThrow(/keepMemory false is not supported/);
    expect(() => refuseUnsupported({ autoResume: { enabled: true } })).toThrow(/autoResume needs autoPause/);
    expect(() => refuseUnsupported({ autoPause: true, autoResume: { enabled: true } })).not.toThrow();
    expect(() => refuseUnsupported({ network: { maskRequestHost: 'h' } })).toThrow(/network\.maskRequestHost is not supported/);
    expect(() => refuseUnsupported({ network: { allowPublicTraffic: false } })).not.toThrow();
    expect(() => refuseUnsupported({ autoPause: false, network: { allowOut: [], denyOut: ['0.0.0.0/0'], allowPublicTraffic: true } })).not.toThrow();
  });

  it('maps autoPause and autoResume to the lifecycle, and nothing without autoPause', () => {
    expect(lifecycleOf({})).toEqual({});
    expect(lifecycleOf({ autoPause: false })).toEqual({});
    expect(lifecycleOf({ autoPause: true })).toEqual({ lifecycle: { onTimeout: 'pause', autoResume: false } });
    expect(lifecycleOf({ autoPause: true, autoResume: { enabled: true } })).toEqual({ lifecycle: { onTimeout: 'pause', autoResume: true } });
  });

  it('maps allow_internet_access and network.allowOut/denyOut to the egress request, and nothing else', () => {
    expect(egressOf({})).toEqual({});
    expect(egressOf({ network: { allowOut: [] } })).toEqual({});
    expect(egressOf({ allow_internet_access: false, network: { allowOut: ['1.1.1.1'], denyOut: ['0.0.0.0/0'] } })).toEqual({
      egress: { allowInternet: false, allowOut: ['1.1.1.1'], denyOut: ['0.0.0.0/0'] },
    });
  });
});

describe('listing', () => {
  it('decodes the double-encoded metadata filter', () => {
    // What the SDK builds for {metadata: {'a b': 'x&y', run: '1'}}, after one decode by the URL parser.
    const sent = new URLSearchParams({ [encodeURIComponent('a b')]: encodeURIComponent('x&y'), run: '1' }).toString();
    const q = new URLSearchParams(`metadata=${encodeURIComponent(sent)}`);
    expect(parseMetadataFilter(q.get('metadata')!)).toEqual({ 'a b': 'x&y', run: '1' });
    expect(() => parseMetadataFilter('novalue')).toThrow(/key=value/);
    expect(parseMetadataFilter('run%3Dx')).toEqual({ run: 'x' });
  });

  it('parses state lists and bounds limit', () => {
    expect(parseListQuery(new URLSearchParams('state=running,paused&limit=5'), ['running']).states).toEqual(['running', 'paused']);
    expect(parseListQuery(new URLSearchParams(''), ['running']).limit).toBe(100);
    expect(() => parseListQuery(new URLSearchParams('state=dead'), ['running'])).toThrow(/state "dead"/);
    expect(() => parseListQuery(new URLSearchParams('limit=101'), ['running'])).toThrow(/limit/);
    expect(() => parseListQuery(new URLSearchParams('limit=0'), ['running'])).toThrow(/limit/);
  });

  const all = [
    rec('a1', '2026-01-01T00:00:01.000Z', { metadata: { run: 'x' } }),
    rec('a2', '2026-01-01T00:00:02.000Z', { state: 'paused', metadata: { run: 'x' } }),
    rec('a3', '2026-01-01T00:00:02.000Z', { metadata: { run: 'y' } }),
    rec('a4', '2026-01-01T00:00:04.000Z', { state: 'destroying' }),
    rec('a5', '2026-01-01T00:00:05.000Z', { metadata: { run: 'x' } }),
  ];

  it('walks every listed sandbox exactly once, newest first, page by page', () => {
    const seen: string[] = [];
    let token: string | undefined;
    let pages = 0;
    do {
      const q = parseListQuery(new URLSearchParams({ limit: '2', ...(token ? { nextToken: token } : {}) }), ['running', 'paused']);
      const p = pageOf(all, q);
      seen.push(...p.items.map((r) => r.sandboxID));
      token = p.nextToken;
      pages++;
    } while (token);
    expect(seen).toEqual(['a5', 'a3', 'a2', 'a1']);
    expect(pages).toBe(2);
  });

  it('filters by state and metadata, ascending when asked', () => {
    const q = parseListQuery(new URLSearchParams({ state: 'running', metadata: 'run=x', order: 'asc' }), ['running', 'paused']);
    expect(pageOf(all, q).items.map((r) => r.sandboxID)).toEqual(['a1', 'a5']);
    const paused = parseListQuery(new URLSearchParams({ state: 'paused' }), ['running']);
    expect(pageOf(all, paused)).toEqual({ items: [all[1]] });
  });

  it("a page token carries ISO 8601 as before times were numbers: an older daemon's token goes on with the walk", () => {
    const first = pageOf(all, parseListQuery(new URLSearchParams({ limit: '2' }), ['running', 'paused']));
    const older = Buffer.from(JSON.stringify(['2026-01-01T00:00:02.000Z', 'a3'])).toString('base64url');
    expect(first.nextToken).toBe(older);
    const next = pageOf(all, parseListQuery(new URLSearchParams({ limit: '2', nextToken: older }), ['running', 'paused']));
    expect(next.items.map((r) => r.sandboxID)).toEqual(['a2', 'a1']);
  });

  it('refuses a token it did not make', () => {
    expect(() => pageOf(all, parseListQuery(new URLSearchParams({ nextToken: 'garbage' }), ['running']))).toThrow(/nextToken/);
  });
});
