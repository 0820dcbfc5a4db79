import { describe, expect, it } from 'vitest';
import type { NodeView, SandboxView } from '../../src/api/types.js';
import { MasterConfigSchema } from '../../src/config/schema.js';
import { describeNode, describeSandbox } from '../../src/tui/describe.js';
import { storeFrom } from './console.js';

const data = storeFrom().getState().data;
const master = MasterConfigSchema.parse({});
const NOW = Date.parse('2026-11-30T05:40:01.000Z');

describe('describe', () => {
  it('a node: quota, density derivation, every scheduler rule with its verdict, events', () => {
    const n = data.nodes['node-b']!;
    const text = describeNode({ ...n, cordoned: false, schedulable: false, reason: 'disk 83% >= 80%', refusedBy: 'disk', lastSeen: new Date(NOW - 500).toISOString() } as NodeView, master, data.events, NOW).join('\n');
    expect(text).toContain('capacity 128 cpus, 251.0Gi (declared in cubelet.toml [quota])');
    expect(text).toMatch(/footprint 4\.1Gi per sandbox/);
    expect(text).toMatch(/paper ceiling 117 .*safety boundary 58 .*cpu ceiling 307/);
    expect(text).toMatch(/effective ceiling 117, set by memory/);
    expect(text).toContain('  pass prefilter');
    expect(text).toContain('  REFUSE disk: disk 83% >= 80%');
    expect(text).toContain('  pass mem');
    expect(text).toContain('  pass cpu');
    expect(text).toMatch(/Recent events\n {2}none in the console buffer$/);
    expect(describeNode(data.nodes['node-a']!, master, data.events, NOW).join('\n')).toMatch(/Recent events\n {2}\d\d:\d\d:\d\d sandbox\.[a-z]+: /);
  });

  it('a cluster node: the layers it holds and the template fetches creates wait for', () => {
    const n = data.nodes['node-a']!;
    expect(describeNode({ ...n, layers: ['sha256:a', 'sha256:b'], fetching: ['py:latest 1/3'] }, master, [], NOW)).toContain('Layers: 2 in the store; fetching py:latest 1/3 layers');
    expect(describeNode(n, master, [], NOW).some((l) => l.startsWith('Layers:'))).toBe(false);
  });

  it('a node without the config says so instead of guessing the rules', () => {
    expect(describeNode(data.nodes['node-a']!, null, [], NOW)).toContain('  config not received yet');
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
