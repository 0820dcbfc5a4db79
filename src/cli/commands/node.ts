// `cubectl node cordon|uncordon|drain|delete NAME`: take a node in and out of scheduling.
import type { Command } from 'commander';
import type { NodeView } from '../../api/types.js';
import { clientFor, examples, globals, numberArg, printJson } from '../io.js';
import { nodeStatus } from './nodes.js';

export function register(program: Command): void {
  const node = program
    .command('node')
    .summary('cordon, uncordon, drain or delete one node')
    .description(
      'Act on one node: cordon (no new sandboxes), uncordon, drain (cordon, then let sandboxes finish or evict them), delete (a cordoned, empty node).',
    )
    .addHelpText('after', examples('cubectl node cordon node-a', 'cubectl node drain node-a --evict --deadline 300', 'cubectl node delete node-a'));

  const show = (cmd: Command, n: NodeView) => {
    if (globals(cmd).json) printJson(n);
    else
      process.stdout.write(
        `node ${n.nodeID}: ${nodeStatus(n)}, ${n.schedulable ? 'schedulable' : `not schedulable (${n.reason || 'no reason given'})`}, ${n.sandboxes.total} sandboxes\n`,
      );
  };

  node
    .command('cordon')
    .description('Stop placing new sandboxes on NAME; running and paused ones stay.')
    .argument('<name>', 'node id (see `cubectl nodes`)')
    .addHelpText('after', examples('cubectl node cordon node-a'))
    .action(async (name: string, _o: unknown, cmd: Command) => show(cmd, await clientFor(cmd).cordon(name)));

  node
    .command('uncordon')
    .description('Let the scheduler place sandboxes on NAME again (also ends a drain).')
    .argument('<name>', 'node id')
    .addHelpText('after', examples('cubectl node uncordon node-a'))
    .action(async (name: string, _o: unknown, cmd: Command) => show(cmd, await clientFor(cmd).uncordon(name)));

  node
    .command('drain')
    .description(
      'Cordon NAME and empty it: without --evict sandboxes end on their own timeouts; with --evict they are destroyed (after --deadline seconds, if given).',
    )
    .argument('<name>', 'node id')
    .option('--evict', 'destroy the sandboxes on the node instead of waiting for them to end', false)
    .option('--deadline <s>', 'seconds to wait before evicting', numberArg({ int: true, min: 0 }))
    .addHelpText('after', examples('cubectl node drain node-a', 'cubectl node drain node-a --evict --deadline 60'))
    .action(async (name: string, o: { evict: boolean; deadline?: number }, cmd: Command) =>
      show(cmd, await clientFor(cmd).drain(name, { evict: o.evict, ...(o.deadline === undefined ? {} : { deadlineSec: o.deadline }) })),
    );

  node
    .command('delete')
    .description('Remove NAME from the registry. Refused (409) unless it is cordoned and has no sandboxes.')
    .argument('<name>', 'node id')
    .addHelpText('after', examples('cubectl node cordon node-a && cubectl node delete node-a'))
    .action(async (name: string, _o: unknown, cmd: Command) => {
      await clientFor(cmd).deleteNode(name);
      if (globals(cmd).json) printJson({ nodeID: name, deleted: true });
      else process.stdout.write(`node ${name} deleted\n`);
    });
}
