import { describe, expect, it } from 'vitest';
import type { NodeView, SandboxView } from '../../src/api/types.js';
import { describeNode, describeSandbox } from '../../src/tui/describe.js';
import { storeFrom } from './console.js';

const data = storeFrom().getState().data;
const NOW = Date.parse('2026-11-30T05:40:01.000Z');

describe('describe', () => {
  it("a node: quota, density derivation, the control plane's verdict and the rule that refused, events", () => {
    const n = data.nodes['node-b']!;
    const rules = [{ rule: 'prefilter' }, { rule: 'cpu' }, { rule: 'mem' }, { rule: 'disk', refusal: 'disk 83% >= 80%' }, { rule: 'realtime_create_num' }];
    const text = describeNode(
      {
        ...n,
        cordoned: false,
        schedulable: false,
        reason: 'disk 83% >= 80%',
        refusedBy: 'disk',
        rules,
        lastSeen: new Date(NOW - 500).toISOString(),
      } as NodeView,
      data.events,
    ).join('\n');
    expect(text).toContain('capacity 128 cpus, 251.0Gi (declared in cubelet.toml [quota])');
    expect(text).toMatch(/footprint 4\.1Gi per sandbox/);
    expect(text).toMatch(/paper ceiling 117 .*safety boundary 58 .*cpu ceiling 307/);
    expect(text).toMatch(/effective ceiling 117, set by memory/);
    expect(text).toContain('NOT schedulable (disk): disk 83% >= 80%');
    // Every rule as the control plane answered it (NodeView.rules), in the pipeline's order.
    expect(text).toMatch(
      /Scheduler rules for the default spec .*\n {2}pass prefilter\n {2}pass cpu\n {2}pass mem\n {2}REFUSE disk: disk 83% >= 80%\n {2}pass realtime_create_num\n/,
    );
    const { rules: _r, ...older } = n;
    expect(describeNode(older as NodeView, []).join('\n')).toMatch(/Scheduler rules .*\n {2}not reported by this daemon/);
    expect(text).toMatch(/Recent events\n {2}none in the console buffer$/);
    expect(describeNode(data.nodes['node-a']!, data.events).join('\n')).toMatch(/Recent events\n {2}\d\d:\d\d:\d\d sandbox\.[a-z]+: /);
  });

  it('a node with a sandbox store: the disk quota held of what the store may promise', () => {
    const n = data.nodes['node-a']!;
    const withStore = {
      ...n,
      usage: {
        ...n.usage,
        quotaDiskUsedGiB: 30,
        store: { kind: 'loop' as const, path: '/d/store', sizeBytes: 12 * 2 ** 30, freeBytes: 8 * 2 ** 30, usedPercent: 33 },
      },
      density: { ...n.density, diskQuotaGiB: 240 },
    };
    expect(describeNode(withStore, [])).toContain(
      '  disk: 30 GiB of disk quota 240 GiB (sandbox store 12.0 GiB times the disk oversell factor; paused sandboxes count in full)',
    );
    expect(describeNode(n, []).some((l) => l.startsWith('  disk:'))).toBe(false);
  });

  it('a node with warm pools: per template, apart from the live counts', () => {
    const n = data.nodes['node-a']!;
    const warm = { templates: { slow: { ready: 1, starting: 0, target: 2 } }, footprintMiB: 302, hits: 4, misses: 1 };
    expect(describeNode({ ...n, warm }, [])).toContain(
      'Warm pools slow 1/2 ready, 4 hits 1 misses, holding 302Mi (not in the counts above: they give way to creates)',
    );
    expect(describeNode(n, []).some((l) => l.startsWith('Warm pools'))).toBe(false);
  });

  it('a cluster node: the layers it holds and the template fetches creates wait for', () => {
    const n = data.nodes['node-a']!;
    expect(describeNode({ ...n, layers: ['sha256:a', 'sha256:b'], fetching: ['py:latest 1/3'] }, [])).toContain(
      'Layers: 2 in the store; fetching py:latest 1/3 layers',
    );
    expect(describeNode(n, []).some((l) => l.startsWith('Layers:'))).toBe(false);
  });

  it('a sandbox: state, spec, egress rules and its own events', () => {
    const sb = data.sandboxes['sb-0003']!;
    const text = describeSandbox({ ...sb, egress: { allowInternet: false, allowOut: ['10.0.0.0/8'] } } as SandboxView, data.events).join('\n');
    expect(text).toMatch(/^Sandbox sb-0003, template host, on node node-a/);
    expect(text).toContain('State: paused');
    expect(text).toContain('Egress: internet denied; allow 10.0.0.0/8; deny -');
    expect(text).toMatch(/State history and events\n {2}\d\d:\d\d:\d\d sandbox\.(created|paused)/);
    expect(text).toMatch(/Logs: .*\n {2}not fetched\n\nRecent output .*\n {2}none yet$/);
  });

  it('a sandbox with the logs and command output the console fetched', () => {
    const sb = data.sandboxes['sb-0003']!;
    const text = describeSandbox(sb, [], { logs: ['2026-11-30 05:40:00 sandbox.created: created'], output: ['$ echo hi', 'hi', '[exit 0]'] }).join('\n');
    expect(text).toMatch(/Logs: .*\n {2}2026-11-30 05:40:00 sandbox\.created: created\n\nRecent output .*\n {2}\$ echo hi\n {2}hi\n {2}\[exit 0\]$/);
  });
});
