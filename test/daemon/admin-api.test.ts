// The admin API on a real cubed: sandbox lifecycle, auth, rate limit, config set, watch.
import { execa } from 'execa';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { NodeView, ReloadResult, SandboxView, WatchMessage } from '../../src/api/types.js';
import { adminExec, call, startDaemon, type TestDaemon } from '../helpers/daemon.js';
import { defaultNetworkPolicy } from '../helpers/kernel.js';

let d: TestDaemon;
beforeAll(async () => {
  d = await startDaemon({ master: { api: { rate_limit_per_sec: 1000 } } });
});
afterAll(async () => {
  await d?.stop();
});

const api = (method: string, path: string, body?: unknown, headers?: Record<string, string>) => call(d, method, path, body, headers);

async function exec(id: string, argv: string[]) {
  const e = await adminExec(d, id, argv);
  expect(e.contentType).toBe('application/x-ndjson');
  return e;
}

describe('sandbox lifecycle through /admin/v1', () => {
  it('creates, execs with streamed output and exit code, pauses, resumes and destroys', async () => {
    const c = await api('POST', '/admin/v1/sandboxes', { templateID: 'base', timeoutSec: 120, metadata: { suite: 'admin' } });
    expect(c.status).toBe(201);
    const sb = c.json as SandboxView;
    expect(sb).toMatchObject({ state: 'running', templateID: 'host', nodeID: d.nodeID, metadata: { suite: 'admin' } });
    expect(sb).not.toHaveProperty('accessToken');
    try {
      const e = await exec(sb.sandboxID, ['sh', '-c', 'echo out; echo err >&2; hostname; exit 7']);
      expect(e.lines[0]).toMatchObject({ type: 'start' });
      expect(e.stdout).toBe(`out\n${sb.sandboxID}\n`);
      expect(e.stderr).toBe('err\n');
      expect(e.end).toMatchObject({ type: 'end', exitCode: 7 });

      const listed = await api('GET', '/admin/v1/sandboxes?state=running');
      expect((listed.json as SandboxView[]).map((s) => s.sandboxID)).toContain(sb.sandboxID);

      const p = await api('POST', `/admin/v1/sandboxes/${sb.sandboxID}/pause`);
      expect(p.json).toMatchObject({ state: 'paused' });
      const again = await api('POST', `/admin/v1/sandboxes/${sb.sandboxID}/pause`);
      expect(again.status).toBe(409);
      const busyExec = await api('POST', `/admin/v1/sandboxes/${sb.sandboxID}/exec`, { argv: ['true'] });
      expect(busyExec.json.code).toBe(130409);
      expect((await api('GET', '/admin/v1/sandboxes?state=paused')).json.map((s: SandboxView) => s.sandboxID)).toEqual([sb.sandboxID]);
      const node = (await api('GET', `/admin/v1/nodes/${d.nodeID}`)).json as NodeView;
      expect(node.sandboxes).toMatchObject({ running: 0, paused: 1 });

      const r = await api('POST', `/admin/v1/sandboxes/${sb.sandboxID}/resume`);
      expect(r.json).toMatchObject({ state: 'running' });
      expect((await exec(sb.sandboxID, ['echo', 'back'])).stdout).toBe('back\n');
    } finally {
      expect((await api('DELETE', `/admin/v1/sandboxes/${sb.sandboxID}`)).status).toBe(204);
    }
    expect((await api('GET', `/admin/v1/sandboxes/${sb.sandboxID}`)).status).toBe(404);
    const events = (await api('GET', '/admin/v1/events?limit=50')).json as { kind: string; sandboxID?: string; death?: string }[];
    // An admin API delete is an operator's kill, not the client's: a death (operator_killed) its tombstone keeps.
    expect(events.filter((e) => e.sandboxID === sb.sandboxID).map((e) => e.kind)).toEqual([
      'sandbox.created',
      'sandbox.paused',
      'sandbox.resumed',
      'sandbox.died',
      'sandbox.destroyed',
    ]);
    expect(events.find((e) => e.sandboxID === sb.sandboxID && e.kind === 'sandbox.died')).toMatchObject({ death: 'operator_killed' });
  });

  it('refuses an unknown template with 404 and a bad body with 400', async () => {
    const t = await api('POST', '/admin/v1/sandboxes', { templateID: 'no-such-template' });
    expect(t.status).toBe(404);
    expect(t.json.message).toContain('template no-such-template not found');
    const b = await api('POST', '/admin/v1/sandboxes', { cpus: 'two' });
    expect(b.status).toBe(400);
    expect(b.json.code).toBe(130400);
  });
});

describe('auth and rate limit', () => {
  it('answers 401 JSON without a key or with a wrong one, and accepts X-API-Key in any case and Bearer', async () => {
    for (const h of [{}, { 'x-api-key': 'wrong' }, { authorization: 'Bearer wrong' }] as Record<string, string>[]) {
      const r = await api('GET', '/admin/v1/nodes', undefined, h);
      expect(r.status).toBe(401);
      expect(r.json).toMatchObject({ code: 130401, status: 401 });
    }
    expect((await api('GET', '/admin/v1/nodes', undefined, { 'X-Api-KEY': d.apiKey })).status).toBe(200);
    expect((await api('GET', '/admin/v1/nodes', undefined, { authorization: `Bearer ${d.apiKey}` })).status).toBe(200);
    expect((await api('GET', '/health', undefined, {})).json).toMatchObject({ status: 'ok', nodeID: d.nodeID });
  });

  it('answers 429 with a numeric Retry-After once a key exceeds its rate', async () => {
    expect((await api('PUT', '/admin/v1/config', { path: 'api.rate_limit_per_sec', value: 5 })).json.ok).toBe(true);
    try {
      const rs = await Promise.all(Array.from({ length: 30 }, () => api('GET', '/admin/v1/stats')));
      const limited = rs.filter((r) => r.status === 429);
      expect(limited.length).toBeGreaterThan(0);
      expect(Number(limited[0]!.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
      expect(limited[0]!.json.code).toBe(130429);
    } finally {
      await new Promise((r) => setTimeout(r, 1100));
      expect((await api('PUT', '/admin/v1/config', { path: 'api.rate_limit_per_sec', value: 1000 })).status).toBe(200);
    }
  });
});

describe('config', () => {
  it('setting the release ratio changes the density the node reports, persisted to the file', async () => {
    const before = (await api('GET', '/admin/v1/nodes')).json[0] as NodeView;
    const set = (await api('PUT', '/admin/v1/config', { path: 'host.quota.paused_resource_release_ratio', value: 0.75 })).json as ReloadResult;
    expect(set.ok).toBe(true);
    expect(set.changes).toEqual([expect.objectContaining({ path: 'host.quota.paused_resource_release_ratio', from: 0, to: 0.75 })]);
    const after = (await api('GET', '/admin/v1/nodes')).json[0] as NodeView;
    expect(after.density.releaseRatio).toBe(0.75);
    expect(after.density.allPausedCeiling).toBeGreaterThan(before.density.allPausedCeiling);
    const cfg = (await api('GET', '/admin/v1/config')).json;
    expect(cfg.master.host.quota.paused_resource_release_ratio).toBe(0.75);
    expect(cfg.version).toBe(set.version);
  });

  it('rejects an invalid value with 400 130483 and keeps the old config', async () => {
    const before = (await api('GET', '/admin/v1/config')).json;
    const r = await api('PUT', '/admin/v1/config', { path: 'host.quota.paused_resource_release_ratio', value: 1.5 });
    expect(r.status).toBe(400);
    expect(r.json.code).toBe(130483);
    expect(r.json.message).toContain('host.quota.paused_resource_release_ratio: must be between 0 and 1');
    const after = (await api('GET', '/admin/v1/config')).json;
    expect(after.version).toBe(before.version);
    expect(after.master.host.quota.paused_resource_release_ratio).toBe(before.master.host.quota.paused_resource_release_ratio);
  });

  it("applies the network policy knobs live to the node's nftables table, and keeps it on a bad value", async () => {
    const NET = 'plugins.io.cubelet.internal.v1.network';
    const table = async () => (await execa('nft', ['list', 'table', 'inet', `cube_${d.tag}`])).stdout;
    // The input chain's drops of IPv4 (IPv6 from a slot link is dropped whatever allow_host_access says).
    const inputDrops4 = (t: string) =>
      (/chain input \{([^}]*)\}/.exec(t)?.[1] ?? '').split('\n').filter((l) => l.includes('drop') && !l.includes('nfproto ipv6')).length;
    const until = async (ok: (t: string) => boolean) => {
      for (let i = 0; i < 200; i++) if (ok(await table())) return true;
      return false;
    };
    const before = await table();
    expect(before).toMatch(/chain egress \{[^}]*\n\s+accept\n/); // internet on by default
    try {
      expect((await api('PUT', '/admin/v1/config', { path: `${NET}.deny_out`, value: ['169.254.0.0/16', '198.51.100.0/24'] })).status).toBe(200);
      expect((await api('PUT', '/admin/v1/config', { path: `${NET}.allow_internet_access`, value: false })).status).toBe(200);
      expect((await api('PUT', '/admin/v1/config', { path: `${NET}.allow_host_access`, value: true })).status).toBe(200);
      expect(
        await until(
          (t) =>
            /198\.51\.100\.0\/24/.test(t) &&
            !/10\.0\.0\.0\/8/.test(t) &&
            /chain egress \{[^}]*counter packets \d+ bytes \d+ drop\n\s+\}/.test(t) &&
            inputDrops4(t) === 0,
        ),
      ).toBe(true);
      const bad = await api('PUT', '/admin/v1/config', { path: `${NET}.deny_out`, value: ['300.0.0.0/8'] });
      expect(bad.status).toBe(400);
      expect(bad.json.message).toMatch(/deny_out\[0\]: must be an IPv4 address or CIDR/);
      expect(await table()).toMatch(/198\.51\.100\.0\/24/);
    } finally {
      const defaults = defaultNetworkPolicy();
      for (const [k, v] of [
        ['deny_out', defaults.denyOut],
        ['allow_internet_access', defaults.internetDefault],
        ['allow_host_access', defaults.allowHostAccess],
      ] as const) {
        await api('PUT', '/admin/v1/config', { path: `${NET}.${k}`, value: v });
      }
    }
    expect(await until((t) => /10\.0\.0\.0\/8/.test(t) && inputDrops4(t) > 0)).toBe(true);
  });
});

describe('watch stream', () => {
  it('sends a snapshot first, then sandbox deltas and events', async () => {
    const ac = new AbortController();
    const res = await fetch(`${d.url}/admin/v1/watch`, { headers: { 'x-api-key': d.apiKey }, signal: ac.signal });
    expect(res.headers.get('content-type')).toBe('text/event-stream');
    const reader = res.body!.getReader();
    const messages: { event: string; data: WatchMessage }[] = [];
    let buf = '';
    const readUntil = async (pred: () => boolean) => {
      while (!pred()) {
        const { value, done } = await reader.read();
        if (done) throw new Error('watch stream ended');
        buf += Buffer.from(value).toString();
        let i;
        while ((i = buf.indexOf('\n\n')) >= 0) {
          const frame = buf.slice(0, i);
          buf = buf.slice(i + 2);
          const event = /^event: (.*)$/m.exec(frame)?.[1];
          const data = /^data: (.*)$/m.exec(frame)?.[1];
          if (event && data) messages.push({ event, data: JSON.parse(data) as WatchMessage });
        }
      }
    };
    try {
      await readUntil(() => messages.length >= 1);
      expect(messages[0]!.event).toBe('snapshot');
      const snap = messages[0]!.data as Extract<WatchMessage, { type: 'snapshot' }>;
      expect(snap.snapshot.nodes[0]!.nodeID).toBe(d.nodeID);
      expect(snap.snapshot.config.version).toBeGreaterThan(0);
      const sb = (await api('POST', '/admin/v1/sandboxes', {})).json as SandboxView;
      await api('DELETE', `/admin/v1/sandboxes/${sb.sandboxID}`);
      await readUntil(() => messages.some((m) => m.data.type === 'sandbox.removed' && m.data.sandboxID === sb.sandboxID));
      const mine = messages.filter(
        (m) => (m.data.type === 'sandbox' && m.data.sandbox.sandboxID === sb.sandboxID) || (m.data.type === 'event' && m.data.event.sandboxID === sb.sandboxID),
      );
      const states = mine.filter((m) => m.data.type === 'sandbox').map((m) => (m.data as Extract<WatchMessage, { type: 'sandbox' }>).sandbox.state);
      expect(states).toEqual(['creating', 'running', 'destroying']);
      expect(mine.some((m) => m.event === 'event' && (m.data as Extract<WatchMessage, { type: 'event' }>).event.kind === 'sandbox.created')).toBe(true);
      for (const m of messages) expect(m.event).toBe(m.data.type);
    } finally {
      ac.abort();
    }
  });
});
