// Prometheus metrics for GET /metrics: sandboxes by state and pool levels are read from the
// control plane at scrape time; create latency is observed from the event stream.
import { Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import type { SandboxState } from './types.js';
import type { ControlPlane } from '../scheduler/control-plane.js';

const STATES: SandboxState[] = ['creating', 'running', 'pausing', 'paused', 'resuming', 'destroying', 'error', 'lost'];

export function createMetrics(cp: ControlPlane): { registry: Registry; close: () => void } {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry, prefix: 'cubed_' });
  new Gauge({
    name: 'cubed_sandboxes',
    help: 'Sandboxes by state',
    labelNames: ['state'],
    registers: [registry],
    async collect() {
      const counts = new Map<string, number>(STATES.map((s) => [s, 0]));
      for (const s of await cp.listSandboxes()) counts.set(s.state, (counts.get(s.state) ?? 0) + 1);
      for (const [state, n] of counts) this.set({ state }, n);
    },
  });
  new Gauge({
    name: 'cubed_pool_slots',
    help: 'Network slot pool levels by node',
    labelNames: ['node', 'level'],
    registers: [registry],
    async collect() {
      for (const n of await cp.listNodes()) {
        const p = n.pool;
        for (const [level, v] of Object.entries({ free: p.free, in_use: p.inUse, creating: p.creating, total: p.total, target: p.target, on_demand: p.onDemand })) this.set({ node: n.nodeID, level }, v);
      }
    },
  });
  const createSeconds = new Histogram({
    name: 'cubed_sandbox_create_seconds',
    help: 'Sandbox create latency on the node',
    buckets: [0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.2, 0.5, 1, 2, 5],
    registers: [registry],
  });
  const close = cp.watch((m) => {
    if (m.type === 'event' && m.event.kind === 'sandbox.created' && m.event.durationMs !== undefined) createSeconds.observe(m.event.durationMs / 1000);
  });
  return { registry, close };
}
