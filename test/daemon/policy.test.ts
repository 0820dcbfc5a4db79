// Placement and resume policy on a real cubed sized for two sandboxes of the default spec
// (TWO_SANDBOX_NODE: footprint 302 MiB, quota 752 MiB).
import { describe, expect, it } from 'vitest';
import type { NodeView, SandboxView } from '../../src/api/types.js';
import { TWO_SANDBOX_NODE } from '../helpers/daemon.js';
import { fileDaemon } from '../helpers/file-daemon.js';

const f = fileDaemon(TWO_SANDBOX_NODE);
const api = f.api;
const node = async () => (await api('GET', `/admin/v1/nodes/${f.d.nodeID}`)).json as NodeView;
const create = async () => api('POST', '/admin/v1/sandboxes', {});

describe('admission', () => {
  it('refuses a resume the release-ratio policy cannot honour (130409) and a create past the ceiling (130597)', async () => {
    expect((await node()).density).toMatchObject({ paperCeiling: 2, headroom: 2, releaseRatio: 1 });
    const a = (await create()).json as SandboxView;
    expect((await api('POST', `/admin/v1/sandboxes/${a.sandboxID}/pause`)).json.state).toBe('paused');
    expect((await node()).density).toMatchObject({ headroom: 2, releasedMiB: 302 });
    const b = await create();
    const c = await create();
    expect([b.status, c.status]).toEqual([201, 201]);
    const n = await node();
    expect(n).toMatchObject({ schedulable: false, refusedBy: 'mem', reason: expect.stringMatching(/^mem 2\/2 /) });

    const refused = await create();
    expect(refused.status).toBe(503);
    expect(refused.json.code).toBe(130597);
    expect(refused.json.message).toContain(`no node available: ${f.d.nodeID}: mem 2/2`);
    const resume = await api('POST', `/admin/v1/sandboxes/${a.sandboxID}/resume`);
    expect(resume.status).toBe(409);
    expect(resume.json.message).toContain('resume rejected by paused_resource_release_ratio policy: need 302MB + used 604MB > mem quota 752MB');

    const events = (await api('GET', '/admin/v1/events?limit=20')).json as { kind: string; code?: number; message: string }[];
    expect(events.filter((e) => e.kind === 'schedule.failed').at(-1)).toMatchObject({ code: 130597, message: expect.stringContaining('mem 2/2') });

    expect((await api('DELETE', `/admin/v1/sandboxes/${(b.json as SandboxView).sandboxID}`)).status).toBe(204);
    expect((await api('POST', `/admin/v1/sandboxes/${a.sandboxID}/resume`)).json.state).toBe('running');
    for (const s of (await api('GET', '/admin/v1/sandboxes')).json as SandboxView[]) await api('DELETE', `/admin/v1/sandboxes/${s.sandboxID}`);
  });

  it('a node over the disk watermark is healthy but not schedulable, and says why', async () => {
    expect((await api('PUT', '/admin/v1/config', { path: 'scheduler.disk_usage_max_percent', value: 1 })).json.ok).toBe(true);
    try {
      const n = await node();
      expect(n.healthy).toBe(true);
      expect(n.schedulable).toBe(false);
      expect(n.reason).toMatch(/^disk \d+(\.\d)?% >= 1%$/);
      const r = await create();
      expect(r.status).toBe(503);
      expect(r.json.message).toMatch(new RegExp(`${f.d.nodeID}: disk \\d+(\\.\\d)?% >= 1%`));
    } finally {
      await api('PUT', '/admin/v1/config', { path: 'scheduler.disk_usage_max_percent', value: 80 });
    }
  });

  it('cordon refuses creates until uncordon; the flag survives a restart', async () => {
    expect((await api('POST', `/admin/v1/nodes/${f.d.nodeID}/cordon`)).json).toMatchObject({ cordoned: true, schedulable: false, reason: 'cordoned' });
    const r = await create();
    expect(r.json.message).toContain(`${f.d.nodeID}: cordoned`);
    await f.d.restart();
    expect(await node()).toMatchObject({ cordoned: true, reason: 'cordoned' });
    expect((await api('DELETE', `/admin/v1/nodes/${f.d.nodeID}`)).status).toBe(409);
    expect((await api('POST', `/admin/v1/nodes/${f.d.nodeID}/uncordon`)).json).toMatchObject({ cordoned: false, schedulable: true, reason: '' });
    expect((await api('POST', '/admin/v1/nodes/nope/cordon')).status).toBe(404);
  });
});

describe('drain', () => {
  it("drain with evict destroys the node's sandboxes and refuses new ones until uncordon", async () => {
    const a = (await create()).json as SandboxView;
    const drained = await api('POST', `/admin/v1/nodes/${f.d.nodeID}/drain`, { evict: true, deadlineSec: 0 });
    // The eviction is pending in the store (whichever replica is alive carries it out) and the node says when.
    expect(drained.json).toMatchObject({ draining: true, schedulable: false, reason: expect.stringMatching(/^draining: sandboxes evicted at /) });
    while ((await api('GET', `/admin/v1/sandboxes/${a.sandboxID}`)).status !== 404) await new Promise((r) => setTimeout(r, 50));
    expect((await create()).json.message).toContain(`${f.d.nodeID}: draining`);
    expect((await api('POST', `/admin/v1/nodes/${f.d.nodeID}/drain`, { evict: 'yes' })).status).toBe(400);
    expect((await api('POST', `/admin/v1/nodes/${f.d.nodeID}/uncordon`)).json).toMatchObject({ draining: false, schedulable: true });
    const kinds = ((await api('GET', '/admin/v1/events?limit=30')).json as { kind: string }[]).map((e) => e.kind);
    expect(kinds).toContain('node.draining');
  });
});

describe('stats and metrics', () => {
  it('reports creates of the last minute and Prometheus metrics on loopback without a key', async () => {
    const s = (await create()).json as SandboxView;
    try {
      const stats = (await api('GET', '/admin/v1/stats')).json;
      expect(stats.createsLastMinute).toBeGreaterThan(0);
      expect(stats.createP99Ms).toBeGreaterThanOrEqual(stats.createP50Ms);
      const m = await fetch(`${f.d.url}/metrics`);
      expect(m.status).toBe(200);
      const text = await m.text();
      expect(text).toContain('cubed_sandboxes{state="running"} 1');
      expect(text).toMatch(/cubed_sandbox_create_seconds_count \d+/);
      // This sandbox's slot at least: the one the drain test before evicted may still be on its way back (2 at load 10).
      expect(text).toMatch(new RegExp(`cubed_pool_slots\\{node="${f.d.nodeID}",level="in_use"\\} [1-9]`));
    } finally {
      await api('DELETE', `/admin/v1/sandboxes/${s.sandboxID}`);
    }
  });
});
