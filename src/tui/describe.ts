// What Enter shows (k9s `d`): a node or a sandbox described in full, as plain lines the
// Describe pane wraps and scrolls. Pure: the store's data and the config in force in, lines
// out. Whether the node takes a create, and the rule that says no, are the control plane's answer
// (NodeView.schedulable, reason, refusedBy): the console does not run placement rules itself.
import type { EventView, NodeView, SandboxView } from '../api/types.js';
import { bytes, diskUse, memUse, mib, percent, ratio, runtimesLabel, warmPools } from './format.js';
import type { SandboxRow } from './model.js';

/** Events about the target shown, newest first. */
export const DESCRIBE_EVENTS = 10;

const recent = (events: readonly EventView[], match: (e: EventView) => boolean): string[] => {
  const out: string[] = [];
  for (let i = events.length - 1; i >= 0 && out.length < DESCRIBE_EVENTS; i--) {
    const e = events[i]!;
    if (match(e)) out.push(`  ${e.at.slice(11, 19)} ${e.kind}${e.code === undefined ? '' : ` ${e.code}`}: ${e.message}`);
  }
  return out.length ? out : ['  none in the console buffer'];
};

export function describeNode(n: NodeView, events: readonly EventView[]): string[] {
  const d = n.density;
  const u = n.usage;
  const lines = [
    `Node ${n.nodeID}${n.address ? ` at ${n.address}` : ''}, runtimes ${runtimesLabel(n)}, last seen ${n.lastSeen}`,
    `State: ${n.lost ? 'LOST' : n.healthy ? 'HEALTHY' : 'UNHEALTHY'}${n.cordoned ? ', cordoned' : ''}${n.draining ? ', draining' : ''}; ${n.schedulable ? 'schedulable' : `NOT schedulable (${n.refusedBy ?? 'rule'}): ${n.reason}`}`,
    '',
    'Quota',
    `  capacity ${n.capacity.cpus} cpus, ${mib(n.capacity.memoryMiB)} (${n.capacity.declared ? 'declared in cubelet.toml [quota]' : 'the host'})`,
    `  in use: ${u.quotaCpuUsed} cpus, ${mib(u.quotaMemUsedMiB)} (running at full footprint, paused at 1 - ratio)${d.memQuotaMiB === undefined ? '' : ` of memory quota ${mib(d.memQuotaMiB)} (capacity less the reserve, times the oversell factor)`}`,
    ...(d.diskQuotaGiB !== undefined && u.store
      ? [
          `  disk: ${u.quotaDiskUsedGiB ?? 0} GiB of disk quota ${d.diskQuotaGiB} GiB (sandbox store ${(u.store.sizeBytes / 1024 ** 3).toFixed(1)} GiB times the disk oversell factor; paused sandboxes count in full)`,
        ]
      : []),
    `  host: cpu ${percent(u.cpuUtilPercent)}, MemAvailable ${mib(u.memAvailableMiB)}${u.memTotalMiB ? ` of ${mib(u.memTotalMiB)}` : ''}, disk ${percent(u.diskUsedPercent)} (watermark ${u.diskWatermarkPercent}%)`,
    '',
    'Density for the default spec',
    `  footprint ${mib(d.footprintMiB)} per sandbox (memory + overhead)`,
    `  paper ceiling ${d.paperCeiling} (memory quota / footprint), safety boundary ${d.safetyBoundary} (no oversell), cpu ceiling ${d.cpuCeiling}`,
    `  effective ceiling ${d.effectiveCeiling}, set by ${d.bottleneck}; all paused ${d.allPausedCeiling} at release ratio ${ratio(d.releaseRatio)} (frees ${mib(d.releasedMiB)} now)`,
    `  live ${n.sandboxes.running} running + ${n.sandboxes.paused} paused (+${n.sandboxes.creating} creating), headroom ${d.headroom}`,
    '',
    ...[['NIC pool', n.pool] as const, ...(n.tapPool ? [['TAP pool', n.tapPool] as const] : [])].map(
      ([name, p]) => `${name}: ${p.free}/${p.total} free, target ${p.target}, ${p.inFlight} waiting, wait p50 ${p.waitP50Ms}ms p99 ${p.waitP99Ms}ms`,
    ),
    // Outside the live counts and headroom above: they give their room back before a create needs it.
    ...(n.warm ? [`${warmPools(n).replace(/^w/, 'W')} (not in the counts above: they give way to creates)`] : []),
    '',
    'Scheduler rules for the default spec (prefilter, then the enabled filters)',
    // The control plane's answers (NodeView.rules): the console runs no placement rule itself.
    ...(n.rules?.length
      ? n.rules.map((v) => `  ${v.refusal === undefined ? 'pass' : 'REFUSE'} ${v.rule}${v.refusal === undefined ? '' : `: ${v.refusal}`}`)
      : ['  not reported by this daemon (the verdict above is its answer)']),
  ];
  lines.push('', `Templates: ${n.templates.join(', ') || 'none'}`);
  // Cluster compute nodes: what they hold and the template fetches a create waits for (templates/fetch.ts).
  if (n.layers) lines.push(`Layers: ${n.layers.length} in the store${n.fetching?.length ? `; fetching ${n.fetching.join(', ')} layers` : ''}`);
  lines.push('', 'Recent events');
  return [...lines, ...recent(events, (e) => e.nodeID === n.nodeID)];
}

/** What `x` (exec) and `l` (logs) brought back for the sandbox, shown under its description. */
export interface SandboxExtras {
  output?: readonly string[] | undefined;
  logs?: readonly string[] | undefined;
}

/** The sandbox's live use line (polled every 2 s while the sandboxes view or this pane shows). */
export function usageLine(x: SandboxRow): string {
  const u = x.usage;
  if (!u) return x.state === 'running' || x.state === 'paused' ? 'Use: not read yet (polled every 2 s while shown)' : 'Use: -';
  return `Use: cpu ${u.cpuPercent === undefined ? '- (next reading)' : percent(u.cpuPercent)} of ${x.spec.cpus} vCPU, memory ${memUse(u)}, ${u.pids} processes, disk ${diskUse(x)}, network rx ${bytes(u.netRxBytes)} tx ${bytes(u.netTxBytes)}`;
}

export function describeSandbox(x: SandboxRow, events: readonly EventView[], extras: SandboxExtras = {}): string[] {
  const eg = x.egress;
  const lines = [
    `Sandbox ${x.sandboxID}, template ${x.templateID}, on node ${x.nodeID} (${x.runtime})`,
    `State: ${x.state}${x.reason ? `: ${x.reason}` : ''}`,
    `Spec: ${x.spec.cpus} cpus, ${mib(x.spec.memoryMiB)}, disk ${x.spec.diskGiB} GiB`,
    usageLine(x),
    `Address: ${x.ip ?? '-'}`,
    `Started ${x.startedAt}, ends ${x.endAt}${x.lifecycle ? ` (on timeout: ${x.lifecycle.onTimeout}${x.lifecycle.autoResume ? ', auto-resume' : ''})` : ''}`,
    `Egress: ${eg ? `internet ${eg.allowInternet === false ? 'denied' : 'allowed'}; allow ${eg.allowOut?.join(', ') || '-'}; deny ${eg.denyOut?.join(', ') || '-'}` : "the node's defaults"}`,
    `Metadata: ${
      Object.entries(x.metadata)
        .map(([k, v]) => `${k}=${v}`)
        .join(' ') || '-'
    }`,
    'Keys here: x runs a command in it (not with --readonly), l fetches its logs and follows its output; both show at the end',
    '',
    'State history and events',
  ];
  return [
    ...lines,
    ...recent(events, (e) => e.sandboxID === x.sandboxID),
    '',
    "Logs: its lifecycle from the daemon history and its processes' output (l fetches, then follows while this pane is open)",
    ...(extras.logs ?? ['not fetched']).map((l) => `  ${l}`),
    '',
    'Recent output (x runs a command)',
    ...(extras.output ?? ['none yet']).map((l) => `  ${l}`),
  ];
}
