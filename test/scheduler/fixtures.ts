// Node snapshots and configs for the scheduler's table tests.
import type { NodeView } from '../../src/model/node.js';
import type { PlacementRequest } from '../../src/scheduler/plugin.js';
import { MasterConfigSchema, type MasterConfig } from '../../src/config/schema.js';

export const NOW = Date.parse('2025-01-01T00:00:00Z');

/** The reference node: 128 cores, 251 GiB, empty, fresh heartbeat, template `host`. */
export function node(
  nodeID: string,
  over: { usage?: Partial<NodeView['usage']>; sandboxes?: Partial<NodeView['sandboxes']> } & Partial<Omit<NodeView, 'usage' | 'sandboxes'>> = {},
): NodeView {
  const { usage, sandboxes, ...rest } = over;
  return {
    nodeID,
    healthy: true,
    schedulable: true,
    reason: '',
    cordoned: false,
    draining: false,
    lost: false,
    runtime: 'ns',
    capacity: { cpus: 128, memoryMiB: 251 * 1024, declared: true },
    usage: { cpuUtilPercent: 10, memAvailableMiB: 200 * 1024, diskUsedPercent: 20, diskWatermarkPercent: 80, quotaMemUsedMiB: 0, quotaCpuUsed: 0, ...usage },
    sandboxes: { running: 0, paused: 0, creating: 0, total: 0, ...sandboxes },
    density: {} as NodeView['density'],
    pool: {} as NodeView['pool'],
    templates: ['host'],
    lastSeen: NOW - 500,
    ...rest,
  };
}

export function config(over: Record<string, unknown> = {}): MasterConfig {
  return MasterConfigSchema.parse(over);
}

export const REQ: PlacementRequest = { templateID: 'host', cpus: 1, memoryMiB: 4096 };
