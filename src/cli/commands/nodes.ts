// `cubectl nodes`: every node with health, schedulability (and why not), load and density.
import type { Command } from 'commander';
import type { NodeView } from '../../api/types.js';
import { diskQuota, runtimesLabel, storeFree, warmLevel } from '../../tui/format.js';
import { clientFor, examples, globals, printJson, table } from '../io.js';

export function register(program: Command): void {
  program
    .command('nodes')
    .summary('list nodes: health, schedulable and why not, runtimes, density, disk, pool')
    .description(
      'List the nodes: health, whether the scheduler may place sandboxes there and why not (cordoned, draining, disk watermark, ...), the runtimes they offer (microvm without a usable KVM shows "emulated: tcg"; "pause frees memory" where a releasing pause backs the release ratio with memory the host gets back), sandboxes running/paused, the density ceiling and headroom for the default spec, disk use against the watermark, the sandbox store free/size and its disk quota (the disk_gib of the sandboxes it holds / the store size x host.quota.disk_oversell_ratio), the network pool (free/total; "tap" free/total: the TAP pool of a node offering microvm), and the warm sandboxes ready of those its warm pools want (per template: --json, warm; sizes: cubectl config set warm_pool.size N, or warm_pool.templates \'{"NAME":N}\').',
    )
    .addHelpText(
      'after',
      `\nJSON (--json): an array of NodeView (src/api/types.ts): nodeID, healthy, schedulable, reason, density {...}, ...\n` +
        examples('cubectl nodes', 'cubectl nodes --json | jq ".[] | {nodeID, schedulable, reason}"'),
    )
    .action(async (_opts: unknown, cmd: Command) => {
      const nodes = await clientFor(cmd).nodes();
      if (globals(cmd).json) printJson(nodes);
      else process.stdout.write(nodesTable(nodes));
    });
}

export function nodeStatus(n: NodeView): string {
  return n.lost ? 'lost' : !n.healthy ? 'unhealthy' : n.draining ? 'draining' : n.cordoned ? 'cordoned' : 'healthy';
}

export function nodesTable(nodes: NodeView[]): string {
  if (nodes.length === 0) return 'no nodes\n';
  return table(
    [
      'node',
      'status',
      'sched',
      'runtimes',
      'running',
      'paused',
      'ceiling',
      'headroom',
      'bottleneck',
      'disk',
      'store free',
      'disk quota',
      'pool',
      'warm',
      'reason',
    ],
    nodes.map((n) => [
      n.nodeID,
      nodeStatus(n),
      n.schedulable ? 'yes' : 'no',
      runtimesLabel(n),
      n.sandboxes.running,
      n.sandboxes.paused,
      n.density.effectiveCeiling,
      n.density.headroom,
      n.density.bottleneck,
      `${Math.round(n.usage.diskUsedPercent)}%/${n.usage.diskWatermarkPercent}%`,
      storeFree(n),
      diskQuota(n),
      `${n.pool.free}/${n.pool.total}${n.tapPool ? ` tap ${n.tapPool.free}/${n.tapPool.total}` : ''}`,
      warmLevel(n),
      n.reason || '-',
    ]),
  );
}
