// GET /metrics on a real cubed sized for two sandboxes of the default spec (TWO_SANDBOX_NODE:
// footprint 302 MiB, quota 752 MiB): the figures triage reasons
// about are the scheduler's own (the same numbers as /admin/v1/nodes), refusals are counted by
// code and rule (every series from the start at 0), and the shipped alert rules (config/alerts.yml)
// use only exported series.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import type { NodeView, SandboxView } from '../../src/api/types.js';
import { TWO_SANDBOX_NODE } from '../helpers/daemon.js';
import { fileDaemon } from '../helpers/file-daemon.js';

const f = fileDaemon(TWO_SANDBOX_NODE);
const api = f.api;

interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

/** Prometheus text format: `name{a="b",...} value` lines and the `# TYPE name kind` lines. */
function parseExposition(text: string): { types: Map<string, string>; samples: Sample[] } {
  const types = new Map<string, string>();
  const samples: Sample[] = [];
  for (const line of text.split('\n')) {
    const t = /^# TYPE (\S+) (\S+)$/.exec(line);
    if (t) types.set(t[1]!, t[2]!);
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (!m) continue;
    const labels: Record<string, string> = {};
    for (const l of (m[2] ?? '').matchAll(/(\w+)="([^"]*)"/g)) labels[l[1]!] = l[2]!;
    samples.push({ name: m[1]!, labels, value: Number(m[3]) });
  }
  return { types, samples };
}

const value = (samples: Sample[], name: string, labels: Record<string, string>) =>
  samples.find((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v))?.value;

/** The shipped alert rules. */
function alertRules(): { alert: string; expr: string; labels: Record<string, string>; annotations: Record<string, string> }[] {
  const parsed = parse(readFileSync(join(import.meta.dirname, '../../config/alerts.yml'), 'utf8')) as {
    groups: { name: string; rules: { alert: string; expr: string; labels: Record<string, string>; annotations: Record<string, string> }[] }[];
  };
  return parsed.groups.flatMap((g) => g.rules);
}

describe('/metrics', () => {
  it('exports the scheduler view of the node, refusals by code and rule, and pause/resume latency', async () => {
    const ids: string[] = [];
    try {
      const a = (await api('POST', '/admin/v1/sandboxes', {})).json as SandboxView;
      ids.push(a.sandboxID);
      expect((await api('POST', `/admin/v1/sandboxes/${a.sandboxID}/pause`)).json.state).toBe('paused');
      for (let i = 0; i < 2; i++) ids.push(((await api('POST', '/admin/v1/sandboxes', {})).json as SandboxView).sandboxID);
      expect((await api('POST', '/admin/v1/sandboxes', {})).json.code).toBe(130597);
      expect((await api('POST', `/admin/v1/sandboxes/${a.sandboxID}/resume`)).status).toBe(409);

      const node = (await api('GET', `/admin/v1/nodes/${f.d.nodeID}`)).json as NodeView;
      const res = await fetch(`${f.d.url}/metrics`);
      expect(res.status).toBe(200);
      const { samples } = parseExposition(await res.text());
      const n = { node: f.d.nodeID };
      const v = (name: string, labels: Record<string, string> = {}) => value(samples, name, { ...n, ...labels });

      expect(v('cubed_node_schedulable')).toBe(0);
      expect(v('cubed_node_refused_by', { rule: 'mem' })).toBe(1);
      expect(v('cubed_node_ceiling_sandboxes', { kind: 'paper' })).toBe(2);
      expect(v('cubed_node_ceiling_sandboxes', { kind: 'effective' })).toBe(node.density.effectiveCeiling);
      expect(v('cubed_node_ceiling_sandboxes', { kind: 'all_paused' })).toBe(node.density.allPausedCeiling);
      expect(v('cubed_node_safe_boundary_sandboxes')).toBe(node.density.safetyBoundary);
      expect(v('cubed_node_headroom_sandboxes')).toBe(node.density.headroom);
      expect(v('cubed_node_footprint_mib')).toBe(302);
      expect(v('cubed_node_memory_capacity_mib')).toBe(1400);
      expect(v('cubed_node_memory_quota_used_mib')).toBe(604);
      expect(v('cubed_node_memory_quota_mib')).toBe(node.density.memQuotaMiB);
      expect(v('cubed_node_released_mib')).toBe(302);
      expect(v('cubed_node_release_ratio')).toBe(1);
      expect(v('cubed_node_sandboxes', { state: 'running' })).toBe(2);
      expect(v('cubed_node_sandboxes', { state: 'paused' })).toBe(1);
      expect(v('cubed_node_disk_watermark_percent')).toBe(node.usage.diskWatermarkPercent);
      // Disk admission's figures (issue 29 item 5): 3 live sandboxes of 1 GiB against the store's quota.
      expect([v('cubed_node_disk_quota_used_gib'), v('cubed_node_disk_quota_gib')]).toEqual([3, node.density.diskQuotaGiB]);
      expect(node.density.diskQuotaGiB).toBeGreaterThan(0);
      expect(v('cubed_node_mem_total_mib')).toBe(node.usage.memTotalMiB);
      expect(v('cubed_node_mem_available_mib')).toBeGreaterThan(0);
      expect(v('cubed_pool_slots', { level: 'target' })).toBe(node.pool.target);
      expect(v('cubed_pool_allocation_wait_seconds', { quantile: '0.99' })).toBeGreaterThanOrEqual(0);
      expect(value(samples, 'cubed_refused_total', { code: '130597', rule: 'mem' })).toBe(1);
      expect(value(samples, 'cubed_refused_total', { code: '130409', rule: 'release_ratio' })).toBe(1);
      expect(value(samples, 'cubed_config_version', {})).toBeGreaterThanOrEqual(1);
      expect(value(samples, 'cubed_sandbox_pause_seconds_count', {})).toBe(1);
      // The refused resume was timed by no node; the pause's histogram and the resume's both exist.
      expect(samples.some((s) => s.name === 'cubed_sandbox_resume_seconds_count')).toBe(true);
      expect(value(samples, 'cubed_sandbox_create_seconds_count', {})).toBe(3);
    } finally {
      for (const id of ids) await api('DELETE', `/admin/v1/sandboxes/${id}`);
    }
  });

  it('backs every series the shipped alert rules (config/alerts.yml) select; refusal counters exist at 0 before any refusal', async () => {
    const rules = alertRules();
    expect(rules.map((r) => r.alert)).toEqual(
      expect.arrayContaining([
        'CubedMemoryOversellCashedIn',
        'CubedDiskWatermark',
        'CubedNicAllocationStall',
        'CubedCpuStarvation',
        'CubedCreatesRefused',
        'CubedMicrovmTapPoolEmpty',
      ]),
    );
    const { types, samples } = parseExposition(await (await fetch(`${f.d.url}/metrics`)).text());
    // No create was refused by disk or the pool here: the series are there anyway, at 0, so an
    // alert's increase() sees the first refusal (a series born at 1 has no earlier sample).
    expect(value(samples, 'cubed_refused_total', { code: '130597', rule: 'disk' })).toBe(0);
    expect(value(samples, 'cubed_refused_total', { code: '130597', rule: 'pool' })).toBe(0);
    for (const r of rules) {
      expect(r.labels.severity, r.alert).toMatch(/^(page|warn)$/);
      expect(r.annotations.summary && r.annotations.description, r.alert).toBeTruthy();
      const selectors = [...r.expr.matchAll(/\b(cubed_[a-z0-9_]+)(?:\{([^}]*)\})?/g)];
      expect(selectors.length, r.alert).toBeGreaterThan(0);
      for (const [, name, matchers] of selectors) {
        expect(types.has(name!), `${r.alert}: ${name} is not exported`).toBe(true);
        const series = samples.filter((s) => s.name === name);
        // Exported (its TYPE line) but without series on a node that offers no microvm runtime, as this one.
        if (name === 'cubed_tap_pool_slots') continue;
        expect(series.length, `${r.alert}: ${name} has no series`).toBeGreaterThan(0);
        for (const [, label, op, want] of (matchers ?? '').matchAll(/(\w+)\s*(=~|!=|=)\s*"([^"]*)"/g)) {
          const re = new RegExp(`^(?:${want})$`);
          const hit = series.some((s) => (op === '=' ? s.labels[label!] === want : op === '=~' ? re.test(s.labels[label!] ?? '') : label! in s.labels));
          expect(hit, `${r.alert}: no ${name} series with ${label}${op}"${want}"`).toBe(true);
        }
      }
      // Grouping and matching labels exist on the series they name (job and instance: added by the scrape).
      for (const [, labels] of r.expr.matchAll(/\b(?:by|on|without|ignoring)\s*\(([^)]*)\)/g)) {
        for (const l of labels!
          .split(',')
          .map((x) => x.trim())
          .filter((x) => x !== 'job' && x !== 'instance'))
          expect(
            samples.some((s) => s.name.startsWith('cubed_') && l in s.labels),
            `${r.alert}: label ${l}`,
          ).toBe(true);
      }
    }
  });
});
