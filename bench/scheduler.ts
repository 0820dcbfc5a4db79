// Scheduler decision benchmark: the real pipeline over simulated node views (no sandboxes run).
// Each placement is applied to the chosen node's usage, so filters start refusing as nodes fill;
// a share of sandboxes is destroyed as we go to hold a steady state.
//   npx tsx bench/scheduler.ts [--nodes 1000] [--decisions 20000] [--select 3] [--book]
// --book: the candidates as the control plane has them: simulated nodes' views (simNodeSpecs)
// through JSON (as read from Redis) and clusterNodeView, in a PlacementBook that each placement
// updates, with new views every 10 decisions (a metrics read every 250 ms at 40 creates/s).
import { parseArgs } from 'node:util';
import type { NodeView } from '../src/model/node.js';
import { simNodeSpecs } from '../src/cubelet/sim-nodes.js';
import { clusterNodeView, PlacementBook } from '../src/control/cluster/node-views.js';
import { summarizeLatencies } from '../src/bench/stats.js';
import { MasterConfigSchema } from '../src/config/schema.js';
import { densityParamsFromConfig, footprintMiB } from '../src/model/density.js';
import { describeRejections, schedule } from '../src/scheduler/pipeline.js';

const { values } = parseArgs({
  options: {
    nodes: { type: 'string', default: '1000' },
    decisions: { type: 'string', default: '20000' },
    select: { type: 'string', default: '3' },
    book: { type: 'boolean', default: false },
  },
});
const N = Number(values.nodes);
const DECISIONS = Number(values.decisions);
const cfg = MasterConfigSchema.parse({ scheduler: { priority_select_num: Number(values.select) } });
const params = densityParamsFromConfig(cfg);

// A seeded generator so runs are comparable.
let seed = 42;
const rand = () => (seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31;

const now = Date.now();
const nodes = Array.from({ length: N }, (_, i) => {
  const view: NodeView = {
    nodeID: `sim-${String(i).padStart(4, '0')}`,
    healthy: true,
    schedulable: true,
    reason: '',
    cordoned: i % 100 === 7,
    draining: false,
    lost: false,
    runtime: 'sim',
    capacity: { cpus: [32, 64, 128][i % 3]!, memoryMiB: [128, 251, 512][i % 3]! * 1024, declared: true },
    usage: {
      cpuUtilPercent: 20 + (i % 50),
      memAvailableMiB: 64 * 1024,
      diskUsedPercent: i % 50 === 3 ? 85 : 40,
      diskWatermarkPercent: 80,
      quotaMemUsedMiB: 0,
      quotaCpuUsed: 0,
    },
    sandboxes: { running: 0, paused: 0, creating: 0, total: 0 },
    density: {} as NodeView['density'],
    pool: {} as NodeView['pool'],
    templates: i % 10 === 0 ? ['other'] : ['host'],
    lastSeen: now,
  };
  return { view, inFlightCreates: i % 4 };
});
const byID = new Map(nodes.map((n) => [n.view.nodeID, n]));
const specs = [
  { cpus: 1, memoryMiB: 4096 },
  { cpus: 2, memoryMiB: 2048 },
  { cpus: 1, memoryMiB: 512 },
];
const placed: { nodeID: string; cpus: number; fp: number }[] = [];
const book = values.book ? new PlacementBook(() => params) : undefined;
const specsOfNodes = simNodeSpecs(N, 'sim-');
/** New views of every node, as a metrics read builds them: each parsed from its own JSON, its own lastSeen. */
function readViews(at: number): NodeView[] {
  return nodes.map(({ view }, i) => {
    const spec = specsOfNodes[i]!;
    const reported = {
      ...view,
      runtime: 'sim',
      runtimes: [{ name: 'sim' }],
      capacity: { cpus: spec.cpus, memoryMiB: spec.memoryMiB, declared: true },
      usage: { ...view.usage, cpuUtilPercent: 2 },
      templates: spec.templates,
      layers: [],
      fetching: [],
      lastSeen: at - (i % 1000),
    };
    return clusterNodeView(
      { nodeID: view.nodeID, cordoned: view.cordoned, draining: false, joinedAt: 0 },
      JSON.parse(JSON.stringify(reported)) as NodeView,
      false,
      at,
      10_000,
    );
  });
}
if (book) book.setViews(readViews(now), now);
const inFlight = new Map<string, number>();

const latMs: number[] = [];
let ok = 0;
let refused = 0;
let lastRefusal = '';
const t0 = process.hrtime.bigint();
for (let d = 0; d < DECISIONS; d++) {
  const spec = specs[d % specs.length]!;
  let cands = nodes;
  if (book) {
    if (d % 10 === 0) book.setViews(readViews(now), now);
    cands = book.withInFlight(inFlight);
  }
  const start = process.hrtime.bigint();
  const r = schedule({ templateID: 'host', ...spec, ...(book ? { fetchable: true } : {}) }, cands, cfg, now, rand);
  latMs.push(Number(process.hrtime.bigint() - start) / 1e6);
  // Counted by the node from before its next read's lastSeen (readViews), which then retires it.
  if (book && r.ok) book.place({ nodeID: r.nodeID, cpus: spec.cpus, memoryMiB: spec.memoryMiB, at: now - 1001 });
  if (r.ok) {
    ok++;
    const n = byID.get(r.nodeID)!;
    const fp = footprintMiB(spec, params);
    n.view.usage.quotaMemUsedMiB += fp;
    n.view.usage.quotaCpuUsed += spec.cpus;
    n.view.sandboxes.running++;
    n.view.sandboxes.total++;
    placed.push({ nodeID: r.nodeID, cpus: spec.cpus, fp });
  } else {
    refused++;
    lastRefusal = describeRejections(r.rejections).slice(0, 160);
  }
  // Steady state: one in three placements is later destroyed.
  if (d % 3 === 2 && placed.length > 0) {
    const gone = placed.splice(Math.floor(rand() * placed.length), 1)[0]!;
    const n = byID.get(gone.nodeID)!;
    n.view.usage.quotaMemUsedMiB -= gone.fp;
    n.view.usage.quotaCpuUsed -= gone.cpus;
    n.view.sandboxes.running--;
    n.view.sandboxes.total--;
  }
}
const totalSec = Number(process.hrtime.bigint() - t0) / 1e9;
const s = summarizeLatencies(latMs);
const fix = (x: number) => x.toFixed(3);
console.log(`nodes=${N} decisions=${DECISIONS} priority_select_num=${cfg.scheduler.priority_select_num} placed=${ok} refused=${refused}`);
console.log(`decision latency ms: p50=${fix(s.p50)} p90=${fix(s.p90)} p99=${fix(s.p99)} max=${fix(s.max)}`);
console.log(`placements/s: ${(ok / totalSec).toFixed(0)} (decisions/s ${(DECISIONS / totalSec).toFixed(0)}, ${totalSec.toFixed(2)} s)`);
if (lastRefusal) console.log(`last refusal: ${lastRefusal}`);
console.log(`targets: p99 <= 1 ms ${s.p99 <= 1 ? 'MET' : 'MISSED'}; >= 1000 placements/s ${ok / totalSec >= 1000 ? 'MET' : 'MISSED'}`);
