// Prometheus metrics for GET /metrics: what the console's triage reasons about, so alerts fire
// before anyone opens it. Gauges are read from ONE control-plane snapshot per scrape (shared
// by every collector of that scrape: the scheduler's own node views, density and stats, never
// a second computation here); latencies are observed from the event stream.
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import type { NodeView, PoolView } from '../model/node.js';
import type { SandboxState } from '../model/sandbox.js';
import type { Snapshot } from '../model/watch.js';
import type { ControlPlane } from '../control/control-plane.js';
import { FILTERS } from '../scheduler/filters/index.js';
import { OUTCOMES } from './dns/answer.js';

const STATES: SandboxState[] = ['creating', 'running', 'pausing', 'paused', 'resuming', 'destroying', 'error', 'lost'];
/**
 * Every (code, rule) a refusal can carry (src/control/admission.ts refusalRule: a filter, the
 * prefilter, the node's pool, no node at all; resumes: the release ratio), exported at 0 from the
 * start: a counter series that first appears at 1 has no earlier sample, so rate() and increase()
 * never see that first refusal (the CubedCreatesRefused rule missed a single one).
 */
export const REFUSAL_SERIES: readonly { code: string; rule: string }[] = [
  ...[...Object.keys(FILTERS), 'prefilter', 'runtime', 'capacity', 'pool', 'no node'].map((rule) => ({ code: '130597', rule })),
  { code: '130409', rule: 'release_ratio' },
];
const LATENCY_BUCKETS = [0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.2, 0.5, 1, 2, 5];

/** One per-node gauge: its name, help and how to read it from the node view (undefined: not exported for that node). */
interface NodeGauge {
  name: string;
  help: string;
  /** Extra label and its values, each read from the node. */
  by?: { label: string; values: Record<string, (n: NodeView) => number | undefined> };
  read?: (n: NodeView) => number | undefined;
}

const NODE_GAUGES: NodeGauge[] = [
  {
    name: 'cubed_node_schedulable',
    help: '1 when the scheduler would place a sandbox of the default spec on the node now (its own filters), else 0',
    read: (n) => (n.schedulable ? 1 : 0),
  },
  {
    name: 'cubed_node_ceiling_sandboxes',
    help: 'Sandboxes of the default spec the node holds: paper (memory quota), cpu, effective (the lower) and all_paused (every sandbox paused at the release ratio in force)',
    by: {
      label: 'kind',
      values: {
        paper: (n) => n.density.paperCeiling,
        cpu: (n) => n.density.cpuCeiling,
        effective: (n) => n.density.effectiveCeiling,
        all_paused: (n) => n.density.allPausedCeiling,
      },
    },
  },
  {
    name: 'cubed_node_safe_boundary_sandboxes',
    help: 'Live sandboxes (running + paused) the node holds without counting on memory released by paused ones',
    read: (n) => n.density.safetyBoundary,
  },
  {
    name: 'cubed_node_headroom_sandboxes',
    help: 'Sandboxes of the default spec that still fit, given the live running and paused counts',
    read: (n) => n.density.headroom,
  },
  {
    name: 'cubed_node_sandboxes',
    help: 'Sandboxes on the node by state',
    by: { label: 'state', values: { running: (n) => n.sandboxes.running, paused: (n) => n.sandboxes.paused, creating: (n) => n.sandboxes.creating } },
  },
  {
    name: 'cubed_node_footprint_mib',
    help: 'Memory footprint of one sandbox of the default spec (memory + base + memory/coefficient)',
    read: (n) => n.density.footprintMiB,
  },
  {
    name: 'cubed_node_memory_capacity_mib',
    help: "The node's memory (declared in [quota] of cubelet.toml or read from the host); the quota density counts against is this less the reserve, times the oversell factor",
    read: (n) => n.capacity.memoryMiB,
  },
  {
    name: 'cubed_node_memory_quota_used_mib',
    help: 'Footprint in use: spec memory of running sandboxes and (1 - r) of paused ones',
    read: (n) => n.usage.quotaMemUsedMiB,
  },
  // The denominator of the footprint in use: without it an alert on the quota's fill had to redo the daemon's density arithmetic.
  {
    name: 'cubed_node_memory_quota_mib',
    help: 'The memory quota footprints count against: the capacity less the reserve, times the oversell factor (above the host memory when oversold)',
    read: (n) => n.density.memQuotaMiB,
  },
  { name: 'cubed_node_released_mib', help: 'Memory the release ratio currently frees from paused sandboxes', read: (n) => n.density.releasedMiB },
  { name: 'cubed_node_release_ratio', help: 'host.quota.paused_resource_release_ratio in force on the node', read: (n) => n.density.releaseRatio },
  // Cluster: a node still on an old version after a config change is what this finds.
  {
    name: 'cubed_node_config_version',
    help: "Cluster: the version of the cluster's config the node runs (absent until it took one, and on a single-node daemon: see cubed_config_version)",
    read: (n) => n.configVersion,
  },
  {
    name: 'cubed_node_disk_used_percent',
    help: 'Disk use the disk filter compares with the watermark (sandbox store or data dir, whichever is fuller)',
    read: (n) => n.usage.diskUsedPercent,
  },
  {
    name: 'cubed_node_disk_quota_used_gib',
    help: 'Sum of the disk_gib quotas of the sandboxes holding a writable layer (paused ones in full): what the disk_quota filter counts (absent without a sandbox store)',
    read: (n) => (n.density.diskQuotaGiB === undefined ? undefined : (n.usage.quotaDiskUsedGiB ?? 0)),
  },
  {
    name: 'cubed_node_disk_quota_gib',
    help: "The disk quota sandboxes' disk_gib count against: the sandbox store's size times host.quota.disk_oversell_ratio (absent without a store)",
    read: (n) => n.density.diskQuotaGiB,
  },
  {
    name: 'cubed_node_disk_watermark_percent',
    help: 'scheduler.disk_usage_max_percent: at or above it the node takes no new sandboxes',
    read: (n) => n.usage.diskWatermarkPercent,
  },
  { name: 'cubed_node_host_cpu_percent', help: "The whole host's CPU use, percent", read: (n) => n.usage.cpuUtilPercent },
  {
    name: 'cubed_node_sandbox_cpu_percent',
    help: "The node's sandboxes' CPU use (their cgroups, about 30 s), percent of its CPUs: what the cpu filter gates on",
    read: (n) => n.usage.sandboxCpuUtilPercent,
  },
  { name: 'cubed_node_mem_available_mib', help: "The host's MemAvailable", read: (n) => n.usage.memAvailableMiB },
  { name: 'cubed_node_mem_total_mib', help: "The host's real MemTotal (the memory quota may be declared above it)", read: (n) => n.usage.memTotalMiB },
  {
    name: 'cubed_pool_allocation_wait_seconds',
    help: 'Network slot allocation wait over the last 5 minutes, by quantile',
    by: { label: 'quantile', values: { '0.5': (n) => n.pool.waitP50Ms / 1000, '0.99': (n) => n.pool.waitP99Ms / 1000 } },
  },
  { name: 'cubed_pool_allocations_waiting', help: 'Allocations waiting for a network slot now', read: (n) => n.pool.inFlight },
  {
    name: 'cubed_pool_on_demand_recent',
    help: 'Allocations served by creating a slot on demand (the pool was empty) in the last 5 minutes',
    read: (n) => n.pool.onDemandRecent,
  },
];

export function createMetrics(cp: ControlPlane, dnsQueries?: () => ReadonlyMap<string, number>): { registry: Registry; close: () => void } {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry, prefix: 'cubed_' });
  // prom-client starts every collector of a scrape at once: they share the snapshot in flight.
  let inFlight: Promise<Snapshot> | undefined;
  const scrape = (): Promise<Snapshot> => {
    inFlight ??= cp.snapshot().finally(() => {
      inFlight = undefined;
    });
    return inFlight;
  };

  new Gauge({
    name: 'cubed_sandboxes',
    help: 'Sandboxes by state',
    labelNames: ['state'],
    registers: [registry],
    async collect() {
      const counts = new Map<string, number>(STATES.map((s) => [s, 0]));
      for (const s of (await scrape()).sandboxes) counts.set(s.state, (counts.get(s.state) ?? 0) + 1);
      for (const [state, n] of counts) this.set({ state }, n);
    },
  });
  const pools: [string, string, (n: NodeView) => PoolView | undefined][] = [
    ['cubed_pool_slots', 'Network slot pool levels by node', (n) => n.pool],
    ['cubed_tap_pool_slots', "TAP pool levels by node (microVMs' network slots, on nodes offering microvm)", (n) => n.tapPool],
  ];
  for (const [name, help, poolOf] of pools) {
    new Gauge({
      name,
      help,
      labelNames: ['node', 'level'],
      registers: [registry],
      async collect() {
        this.reset();
        for (const n of (await scrape()).nodes) {
          const p = poolOf(n);
          if (!p) continue;
          for (const [level, v] of Object.entries({
            free: p.free,
            in_use: p.inUse,
            creating: p.creating,
            total: p.total,
            target: p.target,
            on_demand: p.onDemand,
          }))
            this.set({ node: n.nodeID, level }, v);
        }
      },
    });
  }
  for (const g of NODE_GAUGES) {
    new Gauge({
      name: g.name,
      help: g.help,
      labelNames: g.by ? ['node', g.by.label] : ['node'],
      registers: [registry],
      async collect() {
        // A node that left must not keep its last values.
        this.reset();
        for (const n of (await scrape()).nodes) {
          const entries = g.by
            ? Object.entries(g.by.values).map(([v, read]) => [{ node: n.nodeID, [g.by!.label]: v }, read(n)] as const)
            : [[{ node: n.nodeID }, g.read!(n)] as const];
          for (const [labels, v] of entries) if (v !== undefined) this.set(labels, v);
        }
      },
    });
  }
  new Gauge({
    name: 'cubed_node_refused_by',
    help: 'The scheduler rule that refuses the default spec on the node now (1 per refusing node; absent when schedulable)',
    labelNames: ['node', 'rule'],
    registers: [registry],
    async collect() {
      this.reset();
      for (const n of (await scrape()).nodes) if (!n.schedulable && n.refusedBy) this.set({ node: n.nodeID, rule: n.refusedBy }, 1);
    },
  });
  new Gauge({
    name: 'cubed_warm_sandboxes',
    help: 'Warm pools by node and template (docs/operations.md): ready sandboxes, ones being made, and the size wanted (warm_pool)',
    labelNames: ['node', 'template', 'state'],
    registers: [registry],
    async collect() {
      this.reset();
      for (const n of (await scrape()).nodes)
        for (const [template, w] of Object.entries(n.warm?.templates ?? {}))
          for (const state of ['ready', 'starting', 'target'] as const) this.set({ node: n.nodeID, template, state }, w[state]);
    },
  });
  new Counter({
    name: 'cubed_warm_claims_total',
    help: 'Creates of a warmed template since the node started, by node and result: hit (took a warm sandbox), miss (none fitted: made cold)',
    labelNames: ['node', 'result'],
    registers: [registry],
    async collect() {
      this.reset();
      for (const n of (await scrape()).nodes)
        if (n.warm) for (const result of ['hit', 'miss'] as const) this.inc({ node: n.nodeID, result }, result === 'hit' ? n.warm.hits : n.warm.misses);
    },
  });
  new Gauge({
    name: 'cubed_config_version',
    help: 'Version of the configuration in force (bumped by every accepted reload)',
    registers: [registry],
    collect() {
      this.set(cp.config().version);
    },
  });
  new Gauge({
    name: 'cubed_scheduler_max_cpu_util_percent',
    help: 'scheduler.node_max_cpu_util: the cpu filter refuses creates on a node whose sandboxes use this much or more',
    registers: [registry],
    collect() {
      const cap = (cp.config().master as { scheduler?: { node_max_cpu_util?: number } }).scheduler?.node_max_cpu_util;
      if (cap !== undefined) this.set(cap);
    },
  });
  new Counter({
    name: 'cubed_refused_total',
    help: 'Creates (130597) and resumes (130409) refused since this process started, by code and by the rule that refused (a filter name, pool, release_ratio)',
    labelNames: ['code', 'rule'],
    registers: [registry],
    async collect() {
      this.reset();
      for (const labels of REFUSAL_SERIES) this.inc(labels, 0);
      for (const r of (await scrape()).stats.refusedSinceStart ?? []) this.inc({ code: String(r.code), rule: r.rule }, r.count);
    },
  });
  if (dnsQueries)
    new Counter({
      name: 'cubed_dns_queries_total',
      help: 'DNS queries to api.dns.listen since this process started, by the rcode answered (dropped: not answered, as a response, a runt or over the per-source rate)',
      labelNames: ['rcode'],
      registers: [registry],
      collect() {
        this.reset();
        for (const rcode of OUTCOMES) this.inc({ rcode }, dnsQueries().get(rcode) ?? 0);
      },
    });
  const createSeconds = new Histogram({
    name: 'cubed_sandbox_create_seconds',
    help: 'Sandbox create latency on the node',
    buckets: LATENCY_BUCKETS,
    registers: [registry],
  });
  const pauseSeconds = new Histogram({
    name: 'cubed_sandbox_pause_seconds',
    help: 'Sandbox pause latency on the node',
    buckets: LATENCY_BUCKETS,
    registers: [registry],
  });
  const resumeSeconds = new Histogram({
    name: 'cubed_sandbox_resume_seconds',
    help: 'Sandbox resume latency on the node',
    buckets: LATENCY_BUCKETS,
    registers: [registry],
  });
  const timed = { 'sandbox.created': createSeconds, 'sandbox.paused': pauseSeconds, 'sandbox.resumed': resumeSeconds } as const;
  const close = cp.watch(
    (m) => {
      if (m.type !== 'event' || m.event.durationMs === undefined) return;
      const h = (timed as Partial<Record<string, (typeof timed)[keyof typeof timed]>>)[m.event.kind];
      if (h) h.observe(m.event.durationMs / 1000);
    },
    { eventsOnly: true },
  );
  return { registry, close };
}
